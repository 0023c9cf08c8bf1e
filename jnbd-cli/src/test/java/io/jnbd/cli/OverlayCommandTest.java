package io.jnbd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.ConnectionContext;
import io.jnbd.server.backend.NamedViews;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@code jnbd overlay list}, {@code discard} and {@code commit} on a cow-dir a cow export wrote. */
@Timeout(60)
class OverlayCommandTest {
    @TempDir
    Path dir;

    private Backend open(Path base) {
        try {
            return ExportSpec.parse("b", "file:" + base + ",filter=cow,cow-overlay=client,cow-dir=" + dir.resolve("cow")).open();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static void write(Backend chain, String client, long offset, int length) throws Exception {
        assertThat(((NamedViews) chain).refusal(client, List.of())).isNull();
        Backend c = chain.forConnection(new ConnectionContext(client, List.of(), "t"));
        c.write(offset, ByteBuffer.allocateDirect(length).put(new byte[length]).flip(), false);
        c.zero(1 << 20, 128 * 1024, true, false, true);
        c.connectionClosed();
    }

    @Test
    void listShowsEachOverlayAndDiscardRemovesOneOnlyWhileNoServerHoldsTheDirectory() throws Exception {
        Path base = dir.resolve("base.img");
        Files.write(base, new byte[4 << 20]);
        try (Backend chain = open(base)) {
            write(chain, "pc1", 0, 100);            // one 64 KiB block of data
            write(chain, "pc2", 65536 * 3 - 10, 20); // two
            Run busy = Run.jnbd("overlay", "discard", dir.resolve("cow").toString(), "pc1");
            assertThat(busy.exit()).as(busy.toString()).isEqualTo(1);
            assertThat(busy.err()).contains("is in use");
        }
        Run list = Run.jnbd("overlay", "list", dir.resolve("cow").toString());
        assertThat(list.exit()).as(list.toString()).isZero();
        assertThat(list.out()).containsPattern("pc1\\s+65536\\s+3\\s+2\\s")
            .containsPattern("pc2\\s+131072\\s+4\\s+2\\s");

        Run discard = Run.jnbd("overlay", "discard", dir.resolve("cow").toString(), "pc1");
        assertThat(discard.exit()).as(discard.toString()).isZero();
        assertThat(Run.jnbd("overlay", "list", dir.resolve("cow").toString()).out()).doesNotContain("pc1").contains("pc2");
        assertThat(dir.resolve("cow/clients/pc1")).doesNotExist();
        Run again = Run.jnbd("overlay", "discard", dir.resolve("cow").toString(), "pc1");
        assertThat(again.exit()).isEqualTo(1);
        assertThat(again.err()).contains("no overlay 'pc1'");
        assertThat(Run.jnbd("overlay", "discard", dir.resolve("cow").toString(), "../x").err()).contains("not allowed");
    }

    private static long allocatedBytes(Path p) throws Exception {
        Process stat = new ProcessBuilder("stat", "-c", "%b %B", p.toString()).redirectErrorStream(true).start();
        String[] f = new String(stat.getInputStream().readAllBytes()).trim().split(" ");
        assertThat(stat.waitFor()).isZero();
        return Long.parseLong(f[0]) * Long.parseLong(f[1]);
    }

    @Test
    void commitWritesWhatTheClientReadsAsASparseImageAndRefusesWhatItShould() throws Exception {
        int size = 16 << 20;
        Path base = dir.resolve("base.img");
        byte[] head = new byte[3 << 20];
        new Random(7).nextBytes(head);
        try (var f = new java.io.RandomAccessFile(base.toFile(), "rw")) {
            f.setLength(size); // 3 MiB of data, the rest a hole
            f.write(head);
        }
        Path image = dir.resolve("pc1.img");
        String cow = dir.resolve("cow").toString();
        byte[] seen = new byte[size];
        try (Backend chain = open(base)) {
            assertThat(((NamedViews) chain).refusal("pc1", List.of())).isNull();
            Backend c = chain.forConnection(new ConnectionContext("pc1", List.of(), "t"));
            byte[] w = new byte[200_000];
            new Random(8).nextBytes(w);
            c.write(65536 * 2 + 12_345, ByteBuffer.wrap(w), false);   // over the base's data, unaligned
            c.write(9_000_001, ByteBuffer.wrap(w, 0, 77_777), false);  // into the base's hole
            c.trim(1_000_003, 300_001, false);                         // part of the base's data
            c.zero(65536 * 2 + 50_000, 10_007, false, false, false);   // inside the write
            c.zero(2_500_000, 600_000, true, false, true);             // the end of the base's data
            c.flush();
            c.read(0, ByteBuffer.wrap(seen));
            Run busy = Run.jnbd("overlay", "commit", cow, "pc1", image.toString(), "--base", base.toString());
            assertThat(busy.exit()).as(busy.toString()).isEqualTo(1);
            assertThat(busy.err()).contains("is in use");
            c.connectionClosed();
        }
        assertThat(image).doesNotExist();

        Run commit = Run.jnbd("overlay", "commit", cow, "pc1", image.toString(), "--base", base.toString());
        assertThat(commit.exit()).as(commit.toString()).isZero();
        assertThat(Files.readAllBytes(image)).isEqualTo(seen);
        long allocated = allocatedBytes(image);
        assertThat(allocated).as("allocated bytes of a 16 MiB image with about 3 MiB of data").isLessThan(4 << 20);
        assertThat(dir.resolve("pc1.img.part")).doesNotExist();

        Run exists = Run.jnbd("overlay", "commit", cow, "pc1", image.toString(), "--base", base.toString());
        assertThat(exists.exit()).isEqualTo(1);
        assertThat(exists.err()).contains("exists (--force replaces it)");
        Files.write(image, new byte[] {1, 2, 3});
        Run forced = Run.jnbd("overlay", "commit", cow, "pc1", image.toString(), "--base", base.toString(), "--force");
        assertThat(forced.exit()).as(forced.toString()).isZero();
        assertThat(Files.readAllBytes(image)).isEqualTo(seen);

        Path other = dir.resolve("other.img");
        Files.write(other, new byte[size]);
        Run wrongBase = Run.jnbd("overlay", "commit", cow, "pc1", dir.resolve("x.img").toString(), "--base", other.toString());
        assertThat(wrongBase.exit()).isEqualTo(1);
        assertThat(wrongBase.err()).contains("was not made over this base").contains("contents changed");
        assertThat(dir.resolve("x.img")).doesNotExist();
        Run none = Run.jnbd("overlay", "commit", cow, "pc9", dir.resolve("x.img").toString(), "--base", base.toString());
        assertThat(none.exit()).isEqualTo(1);
        assertThat(none.err()).contains("no overlay 'pc9'");
        assertThat(Run.jnbd("overlay", "commit", "--help").out()).contains("Example").contains("--base");
    }
}
