package io.jnbd.server.io;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

class BufferPoolTest {
    private static final int K = 1024;
    private static final int M = 1024 * 1024;

    private static long address(ByteBuffer b) {
        return MemorySegment.ofBuffer(b).address();
    }

    @Test
    void buffersOfEveryClassAreDistinctAlignedAndKeepTheirBytes() throws Exception {
        BufferPool pool = new BufferPool(256L * M, 64L * M);
        List<BufferPool.Lease> leases = new ArrayList<>();
        // Sizes on both sides of the carved classes (64 KiB .. 1 MiB) and a few inside, several of each.
        int[] sizes = {4 * K, 60 * K, 64 * K, 100 * K, 512 * K, M, 2 * M, 3 * M};
        for (int size : sizes) {
            for (int i = 0; i < 5; i++) leases.add(pool.acquire(size));
        }
        for (int i = 0; i < leases.size(); i++) {
            ByteBuffer b = leases.get(i).buffer();
            assertEquals(0, b.position());
            assertEquals(sizes[i / 5], b.limit());
            assertTrue(b.isDirect());
            assertEquals(0, address(b) % BufferPool.ALIGNMENT, "buffer " + i + " is not page aligned");
            for (int p = 0; p < b.limit(); p += 512) b.put(p, (byte) i);
        }
        for (int i = 0; i < leases.size(); i++) {
            ByteBuffer b = leases.get(i).buffer();
            for (int p = 0; p < b.limit(); p += 512) {
                assertEquals((byte) i, b.get(p), "buffer " + i + " was overwritten at " + p + " by another lease");
            }
        }
        for (BufferPool.Lease l : leases) l.release();
        assertEquals(0, pool.outstandingBytes());
    }

    @Test
    void aCarvedClassFillsOneRegionBeforeTakingAnother() throws Exception {
        BufferPool pool = new BufferPool(256L * M, 64L * M);
        List<BufferPool.Lease> leases = new ArrayList<>();
        for (int i = 0; i < 4; i++) leases.add(pool.acquire(512 * K));
        Set<Long> regions = new HashSet<>();
        for (BufferPool.Lease l : leases) regions.add(address(l.buffer()) & -(2L * M));
        if (NativeIo.AVAILABLE) {
            // Four 512 KiB buffers are exactly one 2 MiB region, which is 2 MiB aligned so it can be one huge page.
            assertEquals(1, regions.size(), "four 512 KiB buffers should come from one region");
        }
        assertEquals(0, pool.cachedBytes(), "the region's four pieces are all on loan");
        leases.forEach(BufferPool.Lease::release);
        assertEquals(2L * M, pool.cachedBytes());
    }

    @Test
    void aRegionGoesBackOnlyWhenAllItsBuffersAreFreeAndTheCacheIsFull() throws Exception {
        BufferPool pool = new BufferPool(256L * M, 0);
        List<BufferPool.Lease> leases = new ArrayList<>();
        for (int i = 0; i < 32; i++) leases.add(pool.acquire(64 * K)); // one region of 64 KiB pieces
        assertEquals(0, pool.cachedBytes());
        for (int i = 0; i < 31; i++) leases.get(i).release();
        // The cache limit is 0, but the region cannot go while one of its buffers is on loan.
        assertEquals(31L * 64 * K, pool.cachedBytes());
        BufferPool.Lease again = pool.acquire(64 * K); // reuses a free piece rather than mapping a region
        assertEquals(30L * 64 * K, pool.cachedBytes());
        again.release();
        leases.get(31).release();
        assertEquals(0, pool.cachedBytes(), "the whole region should have been unmapped");
        assertEquals(0, pool.outstandingBytes());
        // And the class still works afterwards, from a fresh region.
        BufferPool.Lease fresh = pool.acquire(64 * K);
        fresh.buffer().put(0, (byte) 7);
        assertEquals(7, fresh.buffer().get(0));
        fresh.release();
        assertEquals(0, pool.cachedBytes());
    }

    @Test
    void buffersOutsideTheCarvedClassesAreFreedPastTheCacheLimit() throws Exception {
        BufferPool pool = new BufferPool(256L * M, 0);
        pool.acquire(4 * K).release();
        pool.acquire(4 * M).release();
        assertEquals(0, pool.cachedBytes());
        BufferPool kept = new BufferPool(256L * M, 64L * M);
        kept.acquire(4 * K).release();
        kept.acquire(4 * M).release();
        assertEquals(4L * M + 4 * K, kept.cachedBytes());
    }

    @Test
    void releasingTwiceGivesTheBufferBackOnce() throws Exception {
        BufferPool pool = new BufferPool(64L * M, 64L * M);
        BufferPool.Lease l = pool.acquire(256 * K);
        l.release();
        l.release();
        assertEquals(0, pool.outstandingBytes());
        assertEquals(2L * M, pool.cachedBytes()); // one region, counted once
    }

    @Test
    void theBudgetHoldsBackAnAcquireUntilSomethingIsReleased() throws Exception {
        BufferPool pool = new BufferPool(64L * M, 64L * M);
        BufferPool.Lease big = pool.acquire(32 * M);
        BufferPool.Lease other = pool.acquire(32 * M);
        assertNull(pool.tryAcquire(M, 50), "the budget is spent");
        CountDownLatch got = new CountDownLatch(1);
        AtomicReference<BufferPool.Lease> late = new AtomicReference<>();
        Thread t = Thread.ofPlatform().start(() -> {
            try {
                late.set(pool.acquire(512 * K));
                got.countDown();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        assertFalse(got.await(100, TimeUnit.MILLISECONDS), "acquire should wait while the budget is spent");
        big.release();
        assertTrue(got.await(5, TimeUnit.SECONDS));
        t.join();
        late.get().release();
        other.release();
        assertEquals(0, pool.outstandingBytes());
    }

    @Test
    void mapAlignedGivesZeroedMemoryOnTheAskedBoundaryAndUnmapsWithItsArena() {
        if (!NativeIo.AVAILABLE) return; // the pool falls back to ordinary allocation, tested above
        MemorySegment m;
        try (Arena arena = Arena.ofShared()) {
            m = NativeIo.mapAligned(4L * M, 2L * M, arena);
            assertTrue(m != null);
            assertEquals(0, m.address() % (2L * M));
            assertEquals(4L * M, m.byteSize());
            for (long p = 0; p < m.byteSize(); p += 4096) assertEquals(0, m.get(java.lang.foreign.ValueLayout.JAVA_BYTE, p));
            m.set(java.lang.foreign.ValueLayout.JAVA_BYTE, m.byteSize() - 1, (byte) 1);
        }
        assertFalse(m.scope().isAlive());
    }

    @Test
    void hugePagesCountAsOffOnlyWhenTheKernelSelectsNever() {
        assertTrue(BufferPool.hugePagesOff("always madvise [never]\n"));
        assertFalse(BufferPool.hugePagesOff("always [madvise] never\n"));
        assertFalse(BufferPool.hugePagesOff("[always] madvise never\n"));
        assertFalse(BufferPool.hugePagesOff(""));
    }
}
