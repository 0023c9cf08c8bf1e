package io.jnbd.server.filter.dirty;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MetaExtent;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
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
    static final int G = 4096, WRITERS = 4, PER_WRITER = 1500, BLOCKS = WRITERS * PER_WRITER;

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
            AtomicBoolean done = new AtomicBoolean();
            CountDownLatch started = new CountDownLatch(WRITERS);
            List<Future<?>> writers = new ArrayList<>();
            for (int t = 0; t < WRITERS; t++) {
                int w = t;
                writers.add(pool.submit(() -> {
                    started.countDown();
                    for (int k = 0; k < PER_WRITER; k++) {
                        long block = w + (long) k * WRITERS;
                        switch (k % 3) {
                            case 0 -> b.write(block * G + 7, ByteBuffer.allocate(G - 14), false);
                            case 1 -> b.trim(block * G, G, false);
                            default -> b.zero(block * G + G - 1, 1, false, false, false);
                        }
                    }
                    return null;
                }));
            }
            started.await();
            int rotations = 0;
            while (!writers.stream().allMatch(Future::isDone) || rotations < 3) {
                String next = "r" + (rotations + 1);
                bitmaps.rotate(chain.getLast(), next);
                chain.add(next);
                rotations++;
            }
            for (Future<?> f : writers) f.get();
            pool.shutdown();
            done.set(true);
            for (int i = 0; i < BLOCKS; i++) written[i] = true;

            List<boolean[]> sets = new ArrayList<>();
            for (String name : chain) sets.add(dirty(b, name));
            int inSeveral = 0, inNone = 0;
            for (int i = 0; i < BLOCKS; i++) {
                int n = 0;
                for (boolean[] s : sets) if (s[i]) n++;
                if (n > 1) inSeveral++;
                if (n == 0 && written[i]) inNone++;
            }
            assertThat(inSeveral).as("blocks in more than one of %d bitmaps", chain.size()).isZero();
            assertThat(inNone).as("written blocks in none").isZero();
            assertThat(sets.stream().filter(s -> count(s) > 0).count()).as("rotations fell among the writes").isGreaterThan(1);
            List<DirtyBitmaps.Info> infos = bitmaps.list();
            assertThat(infos).extracting(DirtyBitmaps.Info::name).containsExactlyElementsOf(chain);
            assertThat(infos).filteredOn(DirtyBitmaps.Info::recording).extracting(DirtyBitmaps.Info::name).containsExactly(chain.getLast());
        }
    }

    private static int count(boolean[] s) {
        int n = 0;
        for (boolean x : s) if (x) n++;
        return n;
    }

    static boolean[] dirty(Backend b, String name) throws Exception {
        boolean[] out = new boolean[(int) (b.size() / G)];
        long at = 0;
        for (MetaExtent e : b.metaExtents("qemu:dirty-bitmap:" + name, 0, b.size())) {
            if (e.flags() == 1) for (long p = at; p < at + e.length(); p += G) out[(int) (p / G)] = true;
            at += e.length();
        }
        return out;
    }
}
