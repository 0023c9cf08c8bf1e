package io.jnbd.server.filter.dirty;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MetaExtent;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The filter against a boolean a block: random writes, trims and zeroes at any offset and length, clears, and a close
 * and reopen now and then; after each step block status over a random window says exactly what the model says, runs
 * merged, and the dirty byte count matches.
 */
class DirtyModelPropertyTest {
    @TempDir
    Path dir;

    @Test
    void blockStatusMatchesABooleanModel() throws Exception {
        for (int seed = 1; seed <= 12; seed++) run(seed);
    }

    private void run(int seed) throws Exception {
        Random rnd = new Random(seed);
        int g = 512 << rnd.nextInt(5);
        long size = (long) g * (1 + rnd.nextInt(300)) + (rnd.nextBoolean() ? rnd.nextInt(g) : 0);
        int blocks = (int) ((size + g - 1) / g);
        boolean[] model = new boolean[blocks];
        Path bm = dir.resolve("s" + seed);
        Path img = dir.resolve("s" + seed + ".img");
        String spec = "file:" + img + ",size=" + size + ",filter=dirty,dirty-bitmap=m,dirty-granularity=" + g + ",dirty-dir=" + bm;
        Backend b = ExportSpec.parse("d", spec).open();
        try {
            for (int step = 0; step < 300; step++) {
                long off = (long) (rnd.nextDouble() * size);
                long len = 1 + (long) (rnd.nextDouble() * Math.min(size - off, 4L * g));
                switch (rnd.nextInt(8)) {
                    case 0, 1, 2 -> b.write(off, ByteBuffer.allocate((int) len), rnd.nextBoolean());
                    case 3 -> b.trim(off, len, false);
                    case 4 -> b.zero(off, len, rnd.nextBoolean(), false, rnd.nextBoolean());
                    case 5 -> {
                        if (rnd.nextInt(10) == 0) {
                            FilterBackend.find(b, DirtyBitmaps.class).clear("m");
                            java.util.Arrays.fill(model, false);
                        }
                        len = 0;
                    }
                    case 6 -> {
                        if (rnd.nextInt(10) == 0) {
                            b.close();
                            b = ExportSpec.parse("d", spec).open();
                        }
                        len = 0;
                    }
                    default -> {
                        int n = (int) Math.min(size - off, 2L * g);
                        int half = n / 2;
                        b.write(off, new ByteBuffer[] {ByteBuffer.allocate(half), ByteBuffer.allocate(n - half)}, false);
                        len = n;
                    }
                }
                if (len > 0) for (long i = off / g; i <= (off + len - 1) / g; i++) model[(int) i] = true;
                long from = (long) (rnd.nextDouble() * size);
                long want = 1 + (long) (rnd.nextDouble() * (size - from + g));
                check(b.metaExtents("qemu:dirty-bitmap:m", from, want), model, g, size, from, want, "seed " + seed + " step " + step);
            }
            long dirty = 0;
            for (int i = 0; i < blocks; i++) if (model[i]) dirty += Math.min(g, size - (long) i * g);
            assertThat(FilterBackend.find(b, DirtyBitmaps.class).list().getFirst().dirtyBytes()).isEqualTo(dirty);
        } finally {
            b.close();
        }
    }

    private static void check(List<MetaExtent> got, boolean[] model, int g, long size, long from, long want, String as) {
        long end = Math.min(size, from + want);
        long at = from;
        Integer last = null;
        for (MetaExtent e : got) {
            if (last != null) assertThat(e.flags()).as(as + ": runs merged").isNotEqualTo(last);
            for (long blk = at / g; blk <= (at + e.length() - 1) / g; blk++) {
                assertThat(model[(int) blk] ? 1 : 0).as(as + ": block " + blk).isEqualTo(e.flags());
            }
            at += e.length();
            last = e.flags();
        }
        assertThat(at).as(as + ": extents cover exactly the window").isEqualTo(end);
        // the block after the last extent, if any, has the other state (else the extent was cut short)
        if (end < from + want && end < size) assertThat(model[(int) (end / g)] ? 1 : 0).isNotEqualTo(last);
    }
}
