package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code EXPORT/NAME@ro}: a client's overlay read-only, as the client sees it, while the client writes (a backup).
 */
@Timeout(60)
class CowViewServerTest {
    static final int MIB = 1 << 20, BLOCK = 65536, BLOCKS = 16;

    @TempDir
    Path dir;

    @Test
    void theViewReadsTheLiveOverlayBlockByBlockWholeAndWritesNothing() throws Exception {
        Path base = dir.resolve("base.img");
        Files.write(base, pattern(42, 4 * MIB));
        try (ServerFixture f = new ServerFixture(List.of(ExportSpec.parse("boot", "file:" + base
                + ",filter=cow,cow-overlay=client,cow-dir=" + dir.resolve("cow")).openExport()));
             RawClient pc1 = f.open("boot/pc1")) {
            byte[] first = filled(BLOCKS * BLOCK, 1);
            assertThat(pc1.write(0, first, 0)).isZero();
            try (RawClient view = f.open("boot/pc1@ro")) {
                assertThat(view.transmissionFlags & Nbd.FLAG_READ_ONLY).as("READ_ONLY").isNotZero();
                assertThat(view.read(0, first.length)).as("what pc1 wrote, not flushed yet").isEqualTo(first);

                // pc1 rewrites all its blocks again and again, each block one byte value, never flushing; every read of
                // the view must find each block whole (one value), whichever round it is from.
                AtomicBoolean done = new AtomicBoolean();
                CompletableFuture<Integer> writer = CompletableFuture.supplyAsync(() -> {
                    try {
                        int failures = 0;
                        for (int round = 2; round < 60; round++) {
                            for (int b = 0; b < BLOCKS; b += 4) failures += pc1.write((long) b * BLOCK, filled(4 * BLOCK, round), 0) == 0 ? 0 : 1;
                        }
                        return failures;
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    } finally {
                        done.set(true);
                    }
                });
                int reads = 0;
                while (!done.get() || reads < 20) {
                    byte[] seen = view.read(BLOCK / 2, (BLOCKS - 1) * BLOCK); // unaligned, over every block
                    for (int at = 0; at < seen.length; ) {
                        int blockEnd = Math.min(seen.length, (at + BLOCK / 2) / BLOCK * BLOCK + BLOCK / 2);
                        byte v = seen[at];
                        for (int i = at; i < blockEnd; i++) {
                            if (seen[i] != v) throw new AssertionError("read " + reads + ": a block seen half changed at " + (BLOCK / 2 + i));
                        }
                        at = blockEnd;
                    }
                    reads++;
                }
                assertThat(writer.get()).as("pc1's failed writes").isZero();
                assertThat(view.read(0, BLOCKS * BLOCK)).as("the view after pc1's last write").isEqualTo(pc1.read(0, BLOCKS * BLOCK))
                    .isEqualTo(filled(BLOCKS * BLOCK, 59));

                assertThat(view.write(0, new byte[512], 0)).as("a write to the view").isEqualTo(Nbd.EPERM);
                assertThat(view.command(Nbd.CMD_TRIM, 0, 0, BLOCK)).as("a trim of the view").isEqualTo(Nbd.EPERM);
                assertThat(view.command(Nbd.CMD_FLUSH, 0, 0, 0)).isZero();
                assertThat(pc1.read(0, 512)).isEqualTo(Arrays.copyOf(filled(BLOCK, 59), 512));
            }
            for (String refused : List.of("boot/pc9@ro", "boot/x@ro@ro")) {
                try (RawClient c = RawClient.connect(f.address)) {
                    c.greeting();
                    c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
                    RawClient.OptionReply last = c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest(refused, List.of())).getLast();
                    assertThat(last.type()).as("GO of '%s'", refused).isEqualTo(Nbd.REP_ERR_POLICY);
                    assertThat(last.string()).as("why '%s'", refused).contains(refused.equals("boot/pc9@ro") ? "no overlay 'pc9'" : "'@ro' at its end");
                }
            }
        }
        assertThat(dir.resolve("cow/clients/pc9")).as("a view makes no overlay").doesNotExist();
    }

    private static byte[] filled(int length, int value) {
        byte[] b = new byte[length];
        Arrays.fill(b, (byte) value);
        return b;
    }
}
