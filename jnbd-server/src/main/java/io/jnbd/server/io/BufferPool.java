package io.jnbd.server.io;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
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
 *
 * <p>Buffers of 64 KiB and up sit on 2 MiB transparent huge pages where the kernel has them: classes
 * below 2 MiB are carved out of 2 MiB regions, larger ones are aligned to 2 MiB. An O_DIRECT transfer
 * hands the device one segment per physically contiguous run of the buffer, so on 4 KiB pages a
 * 512 KiB read is 128 segments and on a huge page it is one; on the bench machine's virtio disk that
 * was 2.2 GB/s against 1.0 GB/s for 512 KiB reads (docs/performance-log.md). A region goes back to the
 * system only when every buffer carved from it is free and the cache is over its limit. A class maps a
 * new region only when all of its regions are fully on loan, so it never holds more regions than its
 * peak demand filled, and that demand is within the budget: a region kept because one of its buffers is
 * still out is bounded memory, not a leak.
 */
public final class BufferPool {
    private static final int MIN_SHIFT = 12;           // 4 KiB
    private static final int MAX_SHIFT = 26;           // 64 KiB .. 64 MiB classes; requests are at most 32 MiB
    public static final int ALIGNMENT = 4096;
    /** The smallest class on huge pages: below it a buffer spans few pages anyway. */
    private static final int HUGE_MIN_SHIFT = 16;
    /** A transparent huge page on x86-64 and arm64 (4 KiB base pages). */
    private static final int REGION_SHIFT = 21;
    private static final long REGION = 1L << REGION_SHIFT;

    private final long budget;
    private final long maxCachedBytes;
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition released = lock.newCondition();
    private long outstanding;
    /** The most {@link #outstanding} has been since the pool was made. Guarded by lock. */
    private long peak;
    private final AtomicLong cachedBytes = new AtomicLong();
    /** Free buffers of the classes that are not carved; lock-free, as the small classes are the busiest. */
    @SuppressWarnings("unchecked")
    private final ConcurrentLinkedDeque<Slab>[] free = new ConcurrentLinkedDeque[MAX_SHIFT + 1];
    /** Free buffers of the carved classes, each guarded by its own lock with its regions' counts. */
    private final Carved[] carved = new Carved[REGION_SHIFT];

    public BufferPool(long budgetBytes, long maxCachedBytes) {
        if (budgetBytes < (1L << MAX_SHIFT)) throw new IllegalArgumentException("budget below the largest buffer");
        this.budget = budgetBytes;
        this.maxCachedBytes = maxCachedBytes;
        for (int i = MIN_SHIFT; i <= MAX_SHIFT; i++) free[i] = new ConcurrentLinkedDeque<>();
        for (int i = HUGE_MIN_SHIFT; i < REGION_SHIFT; i++) carved[i] = new Carved();
    }

    /** A buffer; {@code region} is the one it was carved from, or null if it has memory of its own. */
    private record Slab(Arena arena, ByteBuffer buffer, Region region) {}

    /** A 2 MiB block split into equal buffers of one class. {@code free} is guarded by that class's lock. */
    private static final class Region {
        final Arena arena;
        final int pieces;
        int free;

        Region(Arena arena, int pieces) {
            this.arena = arena;
            this.pieces = pieces;
        }
    }

    private static final class Carved {
        final ReentrantLock lock = new ReentrantLock();
        final ArrayDeque<Slab> free = new ArrayDeque<>();
    }

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
            peak = Math.max(peak, outstanding);
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
            peak = Math.max(peak, outstanding);
        } finally {
            lock.unlock();
        }
        return lease(shift, size);
    }

    private Lease lease(int shift, int size) {
        if (isCarved(shift)) return new Lease(leaseCarved(shift), shift, size);
        Slab slab = free[shift].pollFirst();
        if (slab != null) {
            cachedBytes.addAndGet(-(1L << shift));
        } else {
            Arena arena = Arena.ofShared();
            slab = new Slab(arena, allocate(arena, 1L << shift, shift >= REGION_SHIFT).asByteBuffer(), null);
        }
        return new Lease(slab, shift, size);
    }

    private static boolean isCarved(int shift) {
        return shift >= HUGE_MIN_SHIFT && shift < REGION_SHIFT;
    }

    /** Memory for a buffer or region: 2 MiB aligned on huge pages if {@code huge} and the platform allows. */
    private static MemorySegment allocate(Arena arena, long bytes, boolean huge) {
        MemorySegment m = huge ? NativeIo.mapAligned(bytes, REGION, arena) : null;
        return m != null ? m : arena.allocate(bytes, ALIGNMENT);
    }

    private Slab leaseCarved(int shift) {
        Carved c = carved[shift];
        c.lock.lock();
        try {
            Slab slab = c.free.pollFirst();
            if (slab != null) {
                slab.region.free--;
                cachedBytes.addAndGet(-(1L << shift));
                return slab;
            }
        } finally {
            c.lock.unlock();
        }
        Arena arena = Arena.ofShared();
        MemorySegment memory = allocate(arena, REGION, true);
        int pieces = 1 << (REGION_SHIFT - shift);
        Region region = new Region(arena, pieces);
        long bytes = 1L << shift;
        c.lock.lock();
        try {
            for (int i = 1; i < pieces; i++) {
                c.free.addLast(new Slab(arena, memory.asSlice(i * bytes, bytes).asByteBuffer(), region));
            }
            region.free = pieces - 1;
            cachedBytes.addAndGet((pieces - 1) * bytes);
        } finally {
            c.lock.unlock();
        }
        return new Slab(arena, memory.asSlice(0, bytes).asByteBuffer(), region);
    }

    private void giveBack(Slab slab, int shift) {
        long bytes = 1L << shift;
        if (slab.region != null) {
            giveBackCarved(slab, shift);
        } else if (cachedBytes.addAndGet(bytes) <= maxCachedBytes) {
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

    private void giveBackCarved(Slab slab, int shift) {
        long bytes = 1L << shift;
        Region region = slab.region;
        Carved c = carved[shift];
        c.lock.lock();
        try {
            region.free++;
            long cached = cachedBytes.addAndGet(bytes);
            if (region.free == region.pieces && cached > maxCachedBytes) {
                c.free.removeIf(s -> s.region == region);
                cachedBytes.addAndGet(-region.pieces * bytes);
                region.arena.close();
            } else {
                c.free.addFirst(slab);
            }
        } finally {
            c.lock.unlock();
        }
    }

    private static final Path THP_ENABLED = Path.of("/sys/kernel/mm/transparent_hugepage/enabled");

    /**
     * True when the kernel says transparent huge pages are off, so buffers stay on 4 KiB pages (worth a
     * line in the log for direct exports); false when they are on or the kernel does not say.
     */
    public static boolean hugePagesOff() {
        try {
            return hugePagesOff(Files.readString(THP_ENABLED));
        } catch (IOException | RuntimeException e) {
            return false;
        }
    }

    /** {@code setting}: the contents of that sysfs file, e.g. {@code always [madvise] never}. */
    static boolean hugePagesOff(String setting) {
        return setting.contains("[never]");
    }

    /** Bytes of free buffers kept for reuse. */
    long cachedBytes() {
        return cachedBytes.get();
    }

    /** Bytes currently on loan. */
    /** The most bytes that were ever on loan at once: what a test or an operator checks against the budget. */
    public long peakBytes() {
        lock.lock();
        try {
            return peak;
        } finally {
            lock.unlock();
        }
    }

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
