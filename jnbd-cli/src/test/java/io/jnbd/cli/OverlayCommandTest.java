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
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@code jnbd overlay list} and {@code discard} on a cow-dir a cow export wrote. */
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
}
