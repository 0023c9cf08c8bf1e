package io.jnbd.server.io;

import java.lang.foreign.Arena;
import java.nio.ByteBuffer;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Off-heap, page-aligned buffers for block data, in power-of-two size classes, with a global budget.
 *
 * <p>Ownership is explicit: whoever acquires a {@link Lease} releases it exactly once, after the last
 * use of its buffer (for a read, after the send completes). When the budget is spent, {@link #acquire}
 * blocks: the connection that wanted the buffer stops reading from its client, which is how the server
 * sheds overload instead of growing.
 */
public final class BufferPool {
    private static final int MIN_SHIFT = 12;           // 4 KiB
    private static final int MAX_SHIFT = 26;           // 64 KiB .. 64 MiB classes; requests are at most 32 MiB
    public static final int ALIGNMENT = 4096;

    private final long budget;
    private final long maxCachedBytes;
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition released = lock.newCondition();
    private long outstanding;
    private final AtomicLong cachedBytes = new AtomicLong();
    @SuppressWarnings("unchecked")
    private final ConcurrentLinkedDeque<Slab>[] free = new ConcurrentLinkedDeque[MAX_SHIFT + 1];

    public BufferPool(long budgetBytes, long maxCachedBytes) {
        if (budgetBytes < (1L << MAX_SHIFT)) throw new IllegalArgumentException("budget below the largest buffer");
        this.budget = budgetBytes;
        this.maxCachedBytes = maxCachedBytes;
        for (int i = MIN_SHIFT; i <= MAX_SHIFT; i++) free[i] = new ConcurrentLinkedDeque<>();
    }

    private record Slab(Arena arena, ByteBuffer buffer) {}

    /** A buffer on loan; {@link #buffer()} has position 0 and limit equal to the size asked for. */
    public final class Lease implements AutoCloseable, Releasable {
        private final Slab slab;
        private final int shift;
        private final ByteBuffer view;
        private boolean released;

        private Lease(Slab slab, int shift, int size) {
            this.slab = slab;
            this.shift = shift;
            this.view = slab.buffer.duplicate().clear().limit(size);
        }

        public ByteBuffer buffer() {
            return view;
        }

        @Override
        public void close() {
            release();
        }

        @Override
        public void release() {
            if (released) return;
            released = true;
            giveBack(slab, shift);
        }
    }

    private static int shiftFor(int size) {
        int shift = 32 - Integer.numberOfLeadingZeros(Math.max(size, 1) - 1);
        return Math.max(MIN_SHIFT, shift);
    }

    /** Takes a buffer of at least {@code size} bytes, waiting while the budget is spent. */
    public Lease acquire(int size) throws InterruptedException {
        int shift = shiftFor(size);
        if (shift > MAX_SHIFT) throw new IllegalArgumentException("buffer of " + size + " bytes is larger than the pool serves");
        long bytes = 1L << shift;
        lock.lock();
        try {
            // One buffer is always allowed, so a single large request can never wait forever.
            while (outstanding > 0 && outstanding + bytes > budget) released.await();
            outstanding += bytes;
        } finally {
            lock.unlock();
        }
        return lease(shift, size);
    }

    /** Like {@link #acquire} but gives up after {@code timeoutMillis}, returning null. */
    public Lease tryAcquire(int size, long timeoutMillis) throws InterruptedException {
        int shift = shiftFor(size);
        if (shift > MAX_SHIFT) throw new IllegalArgumentException("buffer of " + size + " bytes is larger than the pool serves");
        long bytes = 1L << shift;
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMillis);
        lock.lock();
        try {
            while (outstanding > 0 && outstanding + bytes > budget) {
                long left = deadline - System.nanoTime();
                if (left <= 0) return null;
                released.awaitNanos(left);
            }
            outstanding += bytes;
        } finally {
            lock.unlock();
        }
        return lease(shift, size);
    }

    private Lease lease(int shift, int size) {
        Slab slab = free[shift].pollFirst();
        if (slab != null) {
            cachedBytes.addAndGet(-(1L << shift));
        } else {
            Arena arena = Arena.ofShared();
            slab = new Slab(arena, arena.allocate(1L << shift, ALIGNMENT).asByteBuffer());
        }
        return new Lease(slab, shift, size);
    }

    private void giveBack(Slab slab, int shift) {
        long bytes = 1L << shift;
        if (cachedBytes.addAndGet(bytes) <= maxCachedBytes) {
            free[shift].offerFirst(slab);
        } else {
            cachedBytes.addAndGet(-bytes);
            slab.arena.close();
        }
        lock.lock();
        try {
            outstanding -= bytes;
            released.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /** Bytes currently on loan. */
    public long outstandingBytes() {
        lock.lock();
        try {
            return outstanding;
        } finally {
            lock.unlock();
        }
    }

    public long budgetBytes() {
        return budget;
    }
}
