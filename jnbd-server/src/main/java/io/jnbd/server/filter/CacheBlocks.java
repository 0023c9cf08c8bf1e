package io.jnbd.server.filter;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The state of every block of a cache, one byte each off the heap (16 MiB for a 1 TiB export of 64 KiB blocks), and
 * the striped locks that guard them.
 *
 * <p>A block is {@link #ABSENT} (the backend has its bytes), {@link #CLEAN} (the cache file has the backend's bytes)
 * or {@link #DIRTY} (the cache file has bytes the backend has not). A fourth bit is the clock's reference bit: set
 * when the block is used, cleared as the clock hand passes, so the hand evicts blocks not used for a lap (an
 * approximation of least recently used, as nbdkit's two bitmaps are).
 *
 * <p>A block's byte changes only under its stripe's lock; reading it without the lock is a hint (to find dirty
 * blocks, or a victim), confirmed under the lock. Stripes are taken in ascending order, so ranges never deadlock;
 * a thread holding stripes takes others only with {@link #tryLock}.
 *
 * <p>{@link #resident()} counts places taken ({@link #reserve}) rather than blocks stored, so that the bound of
 * {@code cache-max-size} holds while a block is being filled. A bitmap library would need two bitmaps and a lock
 * of its own for what one byte under the stripe lock says; this is why there is none.
 */
final class CacheBlocks implements AutoCloseable {
    static final int ABSENT = 0, CLEAN = 1, DIRTY = 3;
    private static final int STATE = 3, REFERENCED = 4;
    private static final int MAX_STRIPES = 1024;

    private final Arena arena = Arena.ofShared();
    private final MemorySegment table;
    private final long size;
    private final int shift;
    private final long count;
    private final ReentrantLock[] stripes;
    private final AtomicLong resident = new AtomicLong();
    private final AtomicLong dirty = new AtomicLong();
    private final AtomicLong hand = new AtomicLong();

    /** The blocks of an export of {@code size} bytes, {@code blockSize} (a power of two) each; the last may be short. */
    CacheBlocks(long size, int blockSize) {
        this.size = size;
        this.shift = Integer.numberOfTrailingZeros(blockSize);
        this.count = (size + blockSize - 1) >>> shift;
        this.table = arena.allocate(Math.max(1, count)); // zeroed: every block ABSENT
        int n = (int) Math.min(MAX_STRIPES, Math.max(1, Long.highestOneBit(Math.max(1, count - 1)) << 1));
        this.stripes = new ReentrantLock[n];
        for (int i = 0; i < n; i++) stripes[i] = new ReentrantLock();
    }

    long count() {
        return count;
    }

    /** The block holding byte {@code offset}. */
    long blockOf(long offset) {
        return offset >>> shift;
    }

    /** Where block {@code b} starts. */
    long start(long b) {
        return b << shift;
    }

    /** Its length: the block size, but for a short last block. */
    int length(long b) {
        return (int) Math.min(1L << shift, size - start(b));
    }

    /** Places taken, blocks being filled included. */
    long resident() {
        return resident.get();
    }

    long dirty() {
        return dirty.get();
    }

    int state(long b) {
        return table.get(ValueLayout.JAVA_BYTE, b) & STATE;
    }

    boolean referenced(long b) {
        return (table.get(ValueLayout.JAVA_BYTE, b) & REFERENCED) != 0;
    }

    /** Takes a place for one more block if fewer than {@code max} are taken. */
    boolean reserve(long max) {
        for (long r = resident.get(); r < max; r = resident.get()) {
            if (resident.compareAndSet(r, r + 1)) return true;
        }
        return false;
    }

    /** Gives back a place {@link #reserve} took for a block that was not stored after all. */
    void unreserve() {
        resident.decrementAndGet();
    }

    /** An absent block becomes {@code state}, in the place reserved for it; the caller holds its stripe. */
    void insert(long b, int state) {
        if (state == DIRTY) dirty.incrementAndGet();
        table.set(ValueLayout.JAVA_BYTE, b, (byte) (state | REFERENCED));
    }

    /** A stored block becomes clean or dirty, its reference bit as it was; the caller holds its stripe. */
    void mark(long b, int state) {
        byte v = table.get(ValueLayout.JAVA_BYTE, b);
        int old = v & STATE;
        if (old == DIRTY && state != DIRTY) dirty.decrementAndGet();
        if (old != DIRTY && state == DIRTY) dirty.incrementAndGet();
        table.set(ValueLayout.JAVA_BYTE, b, (byte) (state | (v & REFERENCED)));
    }

    /** A stored block becomes absent and gives up its place; the caller holds its stripe. */
    void remove(long b) {
        if (state(b) == DIRTY) dirty.decrementAndGet();
        table.set(ValueLayout.JAVA_BYTE, b, (byte) ABSENT);
        resident.decrementAndGet();
    }

    /** Sets the reference bit of a stored block; the caller holds its stripe. */
    void touch(long b) {
        byte v = table.get(ValueLayout.JAVA_BYTE, b);
        if ((v & STATE) != ABSENT) table.set(ValueLayout.JAVA_BYTE, b, (byte) (v | REFERENCED));
    }

    /** Clears the reference bit (the clock hand passing); the caller holds its stripe. */
    void clearReference(long b) {
        byte v = table.get(ValueLayout.JAVA_BYTE, b);
        table.set(ValueLayout.JAVA_BYTE, b, (byte) (v & ~REFERENCED));
    }

    /** The first block in [{@code from}, {@code to}) that looks dirty, or -1. */
    long nextDirty(long from, long to) {
        for (long b = Math.max(0, from), end = Math.min(to, count); b < end; b++) {
            if ((table.get(ValueLayout.JAVA_BYTE, b) & STATE) == DIRTY) return b;
        }
        return -1;
    }

    /** Moves the clock hand to the next block that looks stored and returns it, or -1 when none does. */
    long advanceHand() {
        long start = Math.floorMod(hand.get(), Math.max(1, count));
        for (long i = 0; i < count; i++) {
            long b = start + i < count ? start + i : start + i - count;
            if ((table.get(ValueLayout.JAVA_BYTE, b) & STATE) != ABSENT) {
                hand.set(b + 1);
                return b;
            }
        }
        return -1;
    }

    private ReentrantLock stripe(long b) {
        return stripes[(int) (b & (stripes.length - 1))];
    }

    void lock(long b) {
        stripe(b).lock();
    }

    boolean tryLock(long b) {
        return stripe(b).tryLock();
    }

    void unlock(long b) {
        stripe(b).unlock();
    }

    /** Locks the stripes of blocks {@code first} to {@code last}, in ascending stripe order. */
    void lock(long first, long last) {
        int n = stripes.length;
        if (last - first + 1 >= n) {
            for (ReentrantLock l : stripes) l.lock();
            return;
        }
        int s0 = (int) (first & (n - 1)), s1 = (int) (last & (n - 1));
        if (s0 <= s1) {
            for (int s = s0; s <= s1; s++) stripes[s].lock();
        } else {
            for (int s = 0; s <= s1; s++) stripes[s].lock();
            for (int s = s0; s < n; s++) stripes[s].lock();
        }
    }

    void unlock(long first, long last) {
        int n = stripes.length;
        if (last - first + 1 >= n) {
            for (ReentrantLock l : stripes) l.unlock();
            return;
        }
        int s0 = (int) (first & (n - 1)), s1 = (int) (last & (n - 1));
        if (s0 <= s1) {
            for (int s = s0; s <= s1; s++) stripes[s].unlock();
        } else {
            for (int s = 0; s <= s1; s++) stripes[s].unlock();
            for (int s = s0; s < n; s++) stripes[s].unlock();
        }
    }

    @Override
    public void close() {
        arena.close();
    }
}
