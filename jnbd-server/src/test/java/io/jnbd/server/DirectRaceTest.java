package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A direct export serves 512-byte-aligned requests on a file system with larger blocks by read-modify-write
 * of the covering block. Requests in flight together that touch different bytes of one block must both
 * take effect, whichever finishes first.
 */
@Timeout(120)
class DirectRaceTest {
    @TempDir
    Path dir;

    @Test
    void subBlockWriteAndWriteZeroesInTheSameBlockBothTakeEffect() throws Exception {
        int blocks = 1024;
        try (ServerFixture fx = new ServerFixture(List.of(ExportSpec.parse("d",
                "file:" + dir.resolve("d.img") + ",size=" + (blocks * 4096) + ",mode=direct").openExport()));
             RawClient c = fx.open("d")) {
            for (int round = 0; round < 3; round++) {
                byte[] old = pattern(round, blocks * 4096);
                assertThat(c.write(0, old, 0)).isZero();
                // A burst of pairs, all in flight together: a write to the first sector of each block, and
                // zeroes over the second half of the same block.
                byte[] expect = old.clone();
                java.nio.ByteBuffer burst = java.nio.ByteBuffer.allocate(blocks * (2 * Nbd.REQUEST_SIZE + 512));
                for (int b = 0; b < blocks; b++) {
                    long at = b * 4096L;
                    byte[] head = pattern(round * 100_000L + b, 512);
                    new Request(0, Nbd.CMD_WRITE, 2L * b, at, 512).encode(burst);
                    burst.put(head);
                    new Request(0, Nbd.CMD_WRITE_ZEROES, 2L * b + 1, at + 2048, 2048).encode(burst);
                    System.arraycopy(head, 0, expect, (int) at, 512);
                    Arrays.fill(expect, (int) at + 2048, (int) at + 4096, (byte) 0);
                }
                c.write(burst.flip());
                for (int i = 0; i < 2 * blocks; i++) assertThat(c.readReply().error()).isZero();
                byte[] got = c.read(0, blocks * 4096);
                for (int b = 0; b < blocks; b++) {
                    int at = b * 4096;
                    assertThat(Arrays.copyOfRange(got, at, at + 4096)).as("round %d block %d", round, b)
                        .isEqualTo(Arrays.copyOfRange(expect, at, at + 4096));
                }
            }
        }
    }

    @Test
    void wholeBlockWriteRacingASubBlockWriteKeepsTheBytesOnlyItWrote() throws Exception {
        int blocks = 1024;
        try (ServerFixture fx = new ServerFixture(List.of(ExportSpec.parse("d",
                "file:" + dir.resolve("w.img") + ",size=" + (blocks * 4096) + ",mode=direct").openExport()));
             RawClient c = fx.open("d")) {
            for (int round = 0; round < 3; round++) {
                assertThat(c.write(0, pattern(round, blocks * 4096), 0)).isZero();
                byte[][] heads = new byte[blocks][], wholes = new byte[blocks][];
                java.nio.ByteBuffer burst = java.nio.ByteBuffer.allocate(blocks * (2 * Nbd.REQUEST_SIZE + 512 + 4096));
                for (int b = 0; b < blocks; b++) {
                    long at = b * 4096L;
                    heads[b] = pattern(round * 100_000L + b, 512);
                    wholes[b] = pattern(-(round * 100_000L + b) - 1, 4096);
                    new Request(0, Nbd.CMD_WRITE, 2L * b, at, 512).encode(burst);
                    burst.put(heads[b]);
                    new Request(0, Nbd.CMD_WRITE, 2L * b + 1, at, 4096).encode(burst);
                    burst.put(wholes[b]);
                }
                c.write(burst.flip());
                for (int i = 0; i < 2 * blocks; i++) assertThat(c.readReply().error()).isZero();
                byte[] got = c.read(0, blocks * 4096);
                for (int b = 0; b < blocks; b++) {
                    int at = b * 4096;
                    // The first sector was written by both, in either order; the rest only by the whole-block write.
                    assertThat(Arrays.copyOfRange(got, at + 512, at + 4096)).as("round %d block %d", round, b)
                        .isEqualTo(Arrays.copyOfRange(wholes[b], 512, 4096));
                    assertThat(Arrays.copyOfRange(got, at, at + 512)).isIn(heads[b], Arrays.copyOfRange(wholes[b], 0, 512));
                }
            }
        }
    }

    @Test
    void subBlockWritesToDifferentSectorsFromTwoConnectionsBothTakeEffect() throws Exception {
        int blocks = 200;
        try (ServerFixture fx = new ServerFixture(List.of(ExportSpec.parse("d",
                "file:" + dir.resolve("e.img") + ",size=" + (blocks * 4096) + ",mode=direct").openExport()));
             RawClient a = fx.open("d"); RawClient b = fx.open("d")) {
            for (int blk = 0; blk < blocks; blk++) {
                long at = blk * 4096L;
                byte[] x = pattern(blk, 512), y = pattern(-blk - 1, 512);
                a.send(new Request(0, Nbd.CMD_WRITE, 1, at, 512), x);
                b.send(new Request(0, Nbd.CMD_WRITE, 1, at + 3584, 512), y);
                assertThat(a.readReply().error()).isZero();
                assertThat(b.readReply().error()).isZero();
                byte[] got = a.read(at, 4096);
                assertThat(Arrays.copyOfRange(got, 0, 512)).isEqualTo(x);
                assertThat(Arrays.copyOfRange(got, 3584, 4096)).isEqualTo(y);
            }
        }
    }

    @Test
    void oneFileExportedCachedAndDirectKeepsSubBlockWritesFromBoth() throws Exception {
        // The direct export's read-modify-write must not undo bytes the cached export wrote meanwhile.
        int blocks = 1024;
        Path file = dir.resolve("both.img");
        try (ServerFixture fx = new ServerFixture(List.of(
                ExportSpec.parse("d", "file:" + file + ",size=" + (blocks * 4096) + ",mode=direct").openExport(),
                ExportSpec.parse("c", "file:" + file + ",mode=cached").openExport()));
             RawClient direct = fx.open("d"); RawClient cached = fx.open("c")) {
            for (int round = 0; round < 3; round++) {
                java.nio.ByteBuffer heads = java.nio.ByteBuffer.allocate(blocks * (Nbd.REQUEST_SIZE + 512));
                java.nio.ByteBuffer tails = java.nio.ByteBuffer.allocate(blocks * (Nbd.REQUEST_SIZE + 512));
                byte[][] head = new byte[blocks][], tail = new byte[blocks][];
                for (int b = 0; b < blocks; b++) {
                    long at = b * 4096L;
                    head[b] = pattern(round * 100_000L + b, 512);
                    tail[b] = pattern(-(round * 100_000L + b) - 1, 512);
                    new Request(0, Nbd.CMD_WRITE, b, at, 512).encode(heads);
                    heads.put(head[b]);
                    new Request(0, Nbd.CMD_WRITE, b, at + 3584, 512).encode(tails);
                    tails.put(tail[b]);
                }
                Thread other = Thread.ofPlatform().start(() -> {
                    try {
                        cached.write(tails.flip());
                    } catch (java.io.IOException e) {
                        throw new java.io.UncheckedIOException(e);
                    }
                });
                direct.write(heads.flip());
                other.join();
                for (int i = 0; i < blocks; i++) {
                    assertThat(direct.readReply().error()).isZero();
                    assertThat(cached.readReply().error()).isZero();
                }
                for (RawClient c : List.of(direct, cached)) {
                    byte[] got = c.read(0, blocks * 4096);
                    for (int b = 0; b < blocks; b++) {
                        int at = b * 4096;
                        assertThat(Arrays.copyOfRange(got, at, at + 512)).as("round %d block %d head", round, b).isEqualTo(head[b]);
                        assertThat(Arrays.copyOfRange(got, at + 3584, at + 4096)).as("round %d block %d tail", round, b).isEqualTo(tail[b]);
                    }
                }
            }
        }
    }
}
