package io.jnbd.server.filter.cow;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.ConnectionContext;
import io.jnbd.server.backend.NamedViews;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

/**
 * The process {@link CowCrashTest} kills: writes round after round into overlay "pc" of a cow export, each round in a
 * slot of its own, flushing after each and saying so on stdout only once the flush has returned. Between flushes it
 * starts the next round, so the kill finds writes no flush acknowledged yet.
 */
public final class CowCrashChild {
    static final int SLOT = 32 * 1024, ROUNDS = 100, BLOCK = 4096;

    static String spec(Path base, Path cowDir) {
        return "file:" + base + ",filter=cow,cow-overlay=client,cow-block-size=4K,cow-dir=" + cowDir;
    }

    /** Round {@code r}'s changes, applied to {@code model} and, when not null, to {@code c}: writes and zeroes in its slot. */
    static void round(int r, byte[] model, Backend c) throws Exception {
        Random rnd = new Random(1000 + r);
        int slot = r * SLOT;
        for (int i = 0; i < 12; i++) {
            int offset = slot + rnd.nextInt(SLOT - 1);
            int length = 1 + rnd.nextInt(Math.min(SLOT - (offset - slot), 3 * BLOCK));
            if (rnd.nextInt(4) == 0) {
                if (c != null) c.zero(offset, length, true, false, false);
                Arrays.fill(model, offset, offset + length, (byte) 0);
            } else {
                byte[] data = new byte[length];
                rnd.nextBytes(data);
                if (c != null) c.write(offset, ByteBuffer.allocateDirect(length).put(data).flip(), false);
                System.arraycopy(data, 0, model, offset, length);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        Backend chain = ExportSpec.parse("boot", spec(Path.of(args[0]), Path.of(args[1]))).open();
        if (((NamedViews) chain).refusal("pc", List.of()) != null) throw new IllegalStateException("refused");
        Backend c = chain.forConnection(new ConnectionContext("pc", List.of(), "child"));
        byte[] model = new byte[(int) c.size()];
        for (int r = 0; r < ROUNDS; r++) {
            round(r, model, c);
            c.flush();
            System.out.println("FLUSHED " + r);
            System.out.flush();
        }
        System.out.println("DONE");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE); // until killed
    }
}
