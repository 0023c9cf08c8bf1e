package io.jnbd.server.filter.dirty;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.backend.MetaExtent;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Rotations while writers write: each write touches blocks of its own (writer t writes blocks t, t + N, t + 2N, ...
 * once each, by write, trim and zero in turn), so "each write lands in exactly one bitmap" is exact: every written
 * block is dirty in exactly one bitmap of the chain of rotations, and no block never written is dirty in any.
 */
@Timeout(120)
class DirtyRotateTest {
    static final int G = 4096, WRITERS = 4, PER_WRITER = 1500, BLOCKS = WRITERS * PER_WRITER, ROTATIONS = 12;

    @TempDir
    Path dir;

    @Test
    void everyWriteLandsInExactlyOneBitmapOfTheRotations() throws Exception {
        String spec = "memory:" + (long) BLOCKS * G + ",filter=dirty,dirty-bitmap=r0,dirty-granularity=4K,dirty-dir=" + dir;
        List<String> chain = new ArrayList<>(List.of("r0"));
        boolean[] written = new boolean[BLOCKS];
        try (Backend b = ExportSpec.parse("d", spec).open()) {
            DirtyBitmaps bitmaps = FilterBackend.find(b, DirtyBitmaps.class);
            ExecutorService pool = Executors.newFixedThreadPool(WRITERS);
            AtomicInteger progress = new AtomicInteger();
            CountDownLatch rotated = new CountDownLatch(1);
            int holdAt = PER_WRITER * 9 / 10;
            List<Future<?>> writers = new ArrayList<>();
            for (int t = 0; t < WRITERS; t++) {
                int w = t;
                writers.add(pool.submit(() -> {
                    for (int k = 0; k < PER_WRITER; k++) {
                        // the last writes wait for the last rotation, so that it falls among the writes
                        if (k == holdAt) rotated.await();
                        long block = w + (long) k * WRITERS;
                        switch (k % 3) {
                            case 0 -> b.write(block * G + 7, ByteBuffer.allocate(G - 14), false);
                            case 1 -> b.trim(block * G, G, false);
                            default -> b.zero(block * G + G - 1, 1, false, false, false);
                        }
                        progress.incrementAndGet();
                    }
                    return null;
                }));
            }
            for (int r = 1; r <= ROTATIONS; r++) {
                // each rotation once the writers are a step further, all before they hold
                while (progress.get() < (long) r * WRITERS * holdAt / (ROTATIONS + 1)) java.util.concurrent.locks.LockSupport.parkNanos(50_000);
                String next = "r" + r;
                bitmaps.rotate(chain.getLast(), next);
                chain.add(next);
            }
            rotated.countDown();
            for (Future<?> f : writers) f.get();
            pool.shutdown();
            for (int i = 0; i < BLOCKS; i++) written[i] = true;

            List<boolean[]> sets = new ArrayList<>();
            for (String name : chain) sets.add(dirty(b, name, G));
            int inSeveral = 0, inNone = 0;
            for (int i = 0; i < BLOCKS; i++) {
                int n = 0;
                for (boolean[] s : sets) if (s[i]) n++;
                if (n > 1) inSeveral++;
                if (n == 0 && written[i]) inNone++;
            }
            assertThat(inSeveral).as("blocks in more than one of %d bitmaps", chain.size()).isZero();
            assertThat(inNone).as("written blocks in none").isZero();
            assertThat(count(sets.getFirst())).as("writes before the first rotation").isGreaterThan(0);
            assertThat(count(sets.getLast())).as("writes after the last").isGreaterThan(0);
            List<DirtyBitmaps.Info> infos = bitmaps.list();
            assertThat(infos).extracting(DirtyBitmaps.Info::name).containsExactlyElementsOf(chain);
            assertThat(infos).filteredOn(DirtyBitmaps.Info::recording).extracting(DirtyBitmaps.Info::name).containsExactly(chain.getLast());
        }
    }

    /**
     * A rotate returns only once the writes marked in the bitmap it froze have reached the backend, so that a backup
     * reading that bitmap's blocks after the rotate reads their new data.
     */
    @Test
    void aRotateWaitsForTheWritesMarkedBeforeIt() throws Exception {
        CountDownLatch inWrite = new CountDownLatch(1), release = new CountDownLatch(1);
        java.util.concurrent.atomic.AtomicBoolean landed = new java.util.concurrent.atomic.AtomicBoolean();
        Backend held = new FilterBackend(new MemoryBackend(16L * G)) {
            @Override
            public void write(long offset, ByteBuffer src, boolean fua) throws java.io.IOException {
                inWrite.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    throw new java.io.InterruptedIOException();
                }
                inner.write(offset, src, fua);
                landed.set(true);
            }
        };
        var options = new io.jnbd.server.backend.BackendOptions(java.util.Map.of("dirty-bitmap", "a", "dirty-dir", dir.toString(),
            "dirty-granularity", "4K"));
        try (Backend b = new DirtyFilterFactory().wrap(held, options)) {
            DirtyBitmaps d = (DirtyBitmaps) b;
            ExecutorService pool = Executors.newFixedThreadPool(2);
            Future<?> write = pool.submit(() -> {
                b.write(3L * G, ByteBuffer.allocate(1), false);
                return null;
            });
            inWrite.await();
            Future<?> rotate = pool.submit(() -> {
                d.rotate("a", "b");
                return null;
            });
            // It cannot return while the write is held; a wrong rotate would have returned by now.
            assertThat(catchThrowable(() -> rotate.get(300, java.util.concurrent.TimeUnit.MILLISECONDS)))
                .isInstanceOf(java.util.concurrent.TimeoutException.class);
            assertThat(landed).isFalse();
            release.countDown();
            rotate.get();
            assertThat(landed).as("the write reached the backend before the rotate returned").isTrue();
            write.get();
            pool.shutdown();
            assertThat(dirty(b, "a", G)[3]).isTrue();
            assertThat(dirty(b, "b", G)[3]).isFalse();
        }
    }

    private static int count(boolean[] s) {
        int n = 0;
        for (boolean x : s) if (x) n++;
        return n;
    }

    /** Block {@code i} of the export dirty in bitmap {@code name}, blocks of {@code g}. */
    static boolean[] dirty(Backend b, String name, int g) throws Exception {
        boolean[] out = new boolean[(int) ((b.size() + g - 1) / g)];
        long at = 0;
        for (MetaExtent e : b.metaExtents("qemu:dirty-bitmap:" + name, 0, b.size())) {
            if (e.flags() == 1) for (long blk = at / g; blk <= (at + e.length() - 1) / g; blk++) out[(int) blk] = true;
            at += e.length();
        }
        return out;
    }
}
