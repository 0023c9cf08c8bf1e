package io.jnbd.pool.memserver;

import static io.jnbd.pool.memserver.PageStore.PAGE;

import io.jnbd.server.io.NativeIo;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The RAM tier: page frames, a free list, and per frame the page it holds and a CLOCK reference bit
 * (second chance, with arrival not counted as a use: see {@link #hold}).
 *
 * <p>Frames are carved from 2 MiB regions mapped on first need, so a store's footprint follows what it
 * holds rather than its capacity, and kept until close: a freed frame goes on the free list for the next
 * page, and the tier never allocates more than its capacity.
 *
 * <p>The memory of a frame is only touched by a thread that holds the stripe lock of the page in it (or,
 * for a frame on its way to a page, the only thread that has it), which is what makes the plain
 * {@link #regions} array and plain reference bits safe: every hand-over of a frame goes through a lock.
 * Per frame this costs 8 bytes of owner, 1 of reference bit and 4 on the free list.
 */
final class RamTier implements AutoCloseable {
    static final int NO_FRAME = -1;
    /** The owner of a frame that holds no page: free, or between eviction and its next page. */
    static final long FREE = -1;
    private static final int FRAMES_PER_REGION = 32;
    private static final long REGION_BYTES = (long) FRAMES_PER_REGION * PAGE; // 2 MiB, a transparent huge page

    private final int frames;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment[] regions;
    /** Read without the page's lock by the CLOCK hand, so atomic; checked again under the lock. */
    private final AtomicLongArray owners;
    /** Racy on purpose: a lost update only makes CLOCK a little less exact. */
    private final byte[] referenced;
    private final AtomicInteger hand = new AtomicInteger();
    private final AtomicInteger holding = new AtomicInteger();

    private final ReentrantLock freeLock = new ReentrantLock();
    private final int[] freeFrames;
    private int freeCount;
    /** Frames below this have been handed out at least once; the rest have no memory yet. */
    private int carved;

    RamTier(int frames) {
        this.frames = frames;
        regions = new MemorySegment[(frames + FRAMES_PER_REGION - 1) / FRAMES_PER_REGION];
        owners = new AtomicLongArray(frames);
        for (int i = 0; i < frames; i++) owners.setPlain(i, FREE);
        referenced = new byte[frames];
        freeFrames = new int[frames];
    }

    int frames() {
        return frames;
    }

    /** Frames that hold a page. */
    int holding() {
        return holding.get();
    }

    /** A frame nobody uses, with stale contents, or {@link #NO_FRAME} when every frame is taken. */
    int takeFree() {
        freeLock.lock();
        try {
            if (freeCount > 0) return freeFrames[--freeCount];
            if (carved == frames) return NO_FRAME;
            int frame = carved++;
            int region = frame / FRAMES_PER_REGION;
            if (regions[region] == null) {
                int inRegion = Math.min(FRAMES_PER_REGION, frames - region * FRAMES_PER_REGION);
                regions[region] = allocateRegion((long) inRegion * PAGE);
            }
            return frame;
        } finally {
            freeLock.unlock();
        }
    }

    /**
     * A region's memory: mapped on a 2 MiB boundary with transparent huge pages asked for, else allocated.
     * Mapped memory is zero already and, on a huge page, comes in one page fault; an allocation is zeroed by
     * the arena (SegmentFactories.initNativeMemory in perf) and then faulted in 4 KiB at a time, and its
     * allocator's header takes a page more per region. A survivor that took 512 MiB of copies in a recovery
     * had 135-141 thousand page faults that way against 4-9 thousand mapped. Frames are handed out in order,
     * so a region is full soon after its first frame; a region on a huge page is resident whole, so at most
     * one region's unused frames count beyond the data.
     */
    private MemorySegment allocateRegion(long bytes) {
        MemorySegment mapped = NativeIo.mapAligned(bytes, REGION_BYTES, arena);
        return mapped != null ? mapped : arena.allocate(bytes, 4096);
    }

    /** Returns a frame that holds no page to the free list. */
    void giveBack(int frame) {
        freeLock.lock();
        try {
            freeFrames[freeCount++] = frame;
        } finally {
            freeLock.unlock();
        }
    }

    /**
     * The frame now holds the page {@code key}; called under that page's stripe lock. Arrival does not
     * count as a use: were it to, a stream of new pages would find every bit set when the hand came round,
     * and CLOCK would fall back to FIFO, evicting pages read between the writes as readily as the pages
     * written once. A page earns its second chance by being used again while it is in RAM.
     */
    void hold(int frame, long key) {
        referenced[frame] = 0;
        owners.set(frame, key);
        holding.incrementAndGet();
    }

    /** The frame no longer holds a page; called under the stripe lock of the page it held. */
    void release(int frame) {
        owners.set(frame, FREE);
        holding.decrementAndGet();
    }

    long owner(int frame) {
        return owners.get(frame);
    }

    /** Marks a use; the test spares the cache line a write when the bit is already set. */
    void touch(int frame) {
        if (referenced[frame] == 0) referenced[frame] = 1;
    }

    /**
     * One step of the CLOCK hand: the frame under it if it holds a page not used since the hand last
     * passed, else {@link #NO_FRAME} (clearing the bit of a used one, its second chance).
     */
    int advanceHand() {
        int frame = Math.floorMod(hand.getAndIncrement(), frames);
        if (owners.get(frame) == FREE) return NO_FRAME;
        if (referenced[frame] != 0) {
            referenced[frame] = 0;
            return NO_FRAME;
        }
        return frame;
    }

    void copyIn(int frame, int inPage, MemorySegment src, long srcOffset, int length) {
        MemorySegment.copy(src, srcOffset, region(frame), base(frame) + inPage, length);
    }

    void copyOut(int frame, int inPage, MemorySegment dst, long dstOffset, int length) {
        MemorySegment.copy(region(frame), base(frame) + inPage, dst, dstOffset, length);
    }

    void zero(int frame, int inPage, int length) {
        region(frame).asSlice(base(frame) + inPage, length).fill((byte) 0);
    }

    /** Zeroes all of the frame but {@code [inPage, inPage + length)}, which the caller is about to fill. */
    void zeroAround(int frame, int inPage, int length) {
        if (inPage > 0) zero(frame, 0, inPage);
        int end = inPage + length;
        if (end < PAGE) zero(frame, end, PAGE - end);
    }

    /** The whole frame as a buffer, for spill I/O. */
    ByteBuffer buffer(int frame) {
        return region(frame).asSlice(base(frame), PAGE).asByteBuffer();
    }

    private MemorySegment region(int frame) {
        return regions[frame / FRAMES_PER_REGION];
    }

    private static long base(int frame) {
        return (long) (frame % FRAMES_PER_REGION) * PAGE;
    }

    /** Frees all page memory; the caller makes sure no thread is inside a frame. */
    @Override
    public void close() {
        Arrays.fill(regions, null);
        arena.close();
    }
}
