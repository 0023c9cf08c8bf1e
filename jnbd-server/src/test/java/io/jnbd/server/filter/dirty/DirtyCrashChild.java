package io.jnbd.server.filter.dirty;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.Random;

/**
 * The process {@link DirtyCrashTest} kills: writes round after round into an export with a dirty bitmap, each round in
 * a slot of its own, saying "WRITTEN r" once its writes returned and "FLUSHED r" once the FLUSH after them did. Before
 * round {@link #ROTATE_AT} it rotates b0 into b1. Between flushes it starts the next round, so the kill finds writes no
 * flush acknowledged yet.
 */
public final class DirtyCrashChild {
    static final int G = 4096, SLOT = 16 * G, ROUNDS = 200, ROTATE_AT = 10;

    static String spec(Path image) {
        return "file:" + image + ",filter=dirty,dirty-bitmap=b0,dirty-granularity=4K";
    }

    /** Round {@code r}'s changes, each as {offset, length}; done on {@code b} when it is not null. */
    static long[][] round(int r, Backend b) throws Exception {
        Random rnd = new Random(2000 + r);
        long[][] out = new long[4][];
        for (int i = 0; i < out.length; i++) {
            long offset = (long) r * SLOT + rnd.nextInt(SLOT - 1);
            long length = 1 + rnd.nextInt((int) Math.min((long) (r + 1) * SLOT - offset, 2L * G));
            out[i] = new long[] {offset, length};
            if (b == null) continue;
            switch (i % 3) {
                case 0 -> b.write(offset, ByteBuffer.allocateDirect((int) length), false);
                case 1 -> b.zero(offset, length, true, false, false);
                default -> b.trim(offset, length, false);
            }
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        Backend b = ExportSpec.parse("d", spec(Path.of(args[0]))).open();
        for (int r = 0; r < ROUNDS; r++) {
            if (r == ROTATE_AT) FilterBackend.find(b, DirtyBitmaps.class).rotate("b0", "b1");
            round(r, b);
            System.out.println("WRITTEN " + r);
            System.out.flush();
            b.flush();
            System.out.println("FLUSHED " + r);
            System.out.flush();
        }
        System.out.println("DONE");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE); // until killed
    }
}
