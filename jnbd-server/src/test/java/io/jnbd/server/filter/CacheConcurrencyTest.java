package io.jnbd.server.filter;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Many threads writing parts of the same blocks at once: each owns every eighth sector, so every write of a sector is
 * a read-modify-write of a block that seven other threads are changing too, while flushes write blocks back, a cache
 * that holds eight blocks evicts, and another thread reads and fills. Each thread reads back what it wrote while the
 * others go on; at the end the filter, and after a flush the backend, hold every sector's last acknowledged write.
 */
@Timeout(120)
class CacheConcurrencyTest {
    private static final int SECTOR = 512;
    private static final int BLOCK = 4096;
    private static final int BLOCKS = 16;
    private static final int SIZE = BLOCKS * BLOCK;
    private static final int THREADS = 8;
    private static final int OPS = 300;

    static Stream<Arguments> configs() {
        List<Arguments> out = new ArrayList<>();
        for (CacheConfig.Mode m : CacheConfig.Mode.values()) {
            for (long max : new long[] {-1, 4L * BLOCK}) {
                for (boolean onRead : new boolean[] {false, true}) out.add(Arguments.of(m, max, onRead));
            }
        }
        return out.stream();
    }

    @ParameterizedTest(name = "{0}, max {1}, on read {2}")
    @MethodSource("configs")
    void overlappingPartialWritesFromManyThreadsLoseNothingAcknowledged(CacheConfig.Mode mode, long max, boolean onRead) throws Exception {
        CountingBackend inner = new CountingBackend(SIZE);
        CacheConfig config = new CacheConfig(mode, BLOCK, max, 75, 50, onRead ? CacheConfig.OnRead.ON : CacheConfig.OnRead.OFF, null);
        byte[] expected = new byte[SIZE];
        ExecutorService pool = Executors.newFixedThreadPool(THREADS + 1);
        try (CacheFilter c = new CacheFilter(inner, config, CacheFilterFactory.tmpdir())) {
            CountDownLatch start = new CountDownLatch(1);
            List<Future<?>> done = new ArrayList<>();
            for (int t = 0; t < THREADS; t++) {
                int owner = t;
                done.add(pool.submit(() -> {
                    start.await();
                    Random r = new Random(owner);
                    for (int i = 0; i < OPS; i++) {
                        long at = (long) (r.nextInt(SIZE / SECTOR / THREADS) * THREADS + owner) * SECTOR;
                        byte[] data = new byte[SECTOR];
                        int dice = r.nextInt(32);
                        if (dice == 0) {
                            c.zero(at, SECTOR, r.nextBoolean(), false, r.nextBoolean());
                        } else {
                            r.nextBytes(data);
                            c.write(at, ByteBuffer.allocateDirect(SECTOR).put(data).flip(), dice == 1);
                        }
                        // Sectors are owned: only this thread writes these bytes, so the model needs no lock.
                        System.arraycopy(data, 0, expected, (int) at, SECTOR);
                        assertThat(read(c, at, SECTOR)).as("thread %d reads back its sector at %d", owner, at).isEqualTo(data);
                        if (dice == 2) c.flush();
                    }
                    return null;
                }));
            }
            done.add(pool.submit(() -> {
                start.await();
                Random r = new Random(99);
                for (int i = 0; i < OPS; i++) {
                    int at = r.nextInt(SIZE - 1), n = 1 + r.nextInt(Math.min(3 * BLOCK, SIZE - at));
                    if (r.nextBoolean()) read(c, at, n);
                    else c.cache(at, n);
                    c.extents(at, n);
                }
                return null;
            }));
            start.countDown();
            for (Future<?> f : done) f.get();
            if (max > 0) assertThat(c.residentBlocks()).isLessThanOrEqualTo(max / BLOCK);
            assertThat(read(c, 0, SIZE)).isEqualTo(expected);
            c.flush();
            if (mode != CacheConfig.Mode.UNSAFE) assertThat(inner.bytes(0, SIZE)).as("the backend after a flush").isEqualTo(expected);
        } finally {
            pool.shutdownNow();
        }
        assertThat(inner.bytes(0, SIZE)).as("the backend after close").isEqualTo(expected);
        inner.release();
    }

    private static byte[] read(CacheFilter c, long offset, int length) throws IOException {
        ByteBuffer dst = ByteBuffer.allocateDirect(length);
        c.read(offset, dst);
        byte[] out = new byte[length];
        dst.flip().get(out);
        return out;
    }
}
