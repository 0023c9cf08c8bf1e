package io.jnbd.cli;

import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code jnbd copy --bitmap}'s refusals against jnbd's own server without a dirty filter (it offers no bitmap);
 * the copy itself is tested against qemu-nbd -B in jnbd-interop.
 */
class CopyBitmapTest {

    @Test
    void aBitmapTheSourceDoesNotOfferFailsInOneLineAndLeavesTheDestinationAlone(@TempDir Path dir) throws Exception {
        List<Export> exports = List.of(ExportSpec.parse("disk=memory:4M").openExport());
        try (NbdServer server = new NbdServer(new Exports(exports, "disk"), ServerConfig.defaults())) {
            int port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))).getPort();
            String disk = "nbd://127.0.0.1:" + port + "/disk";
            Path dst = dir.resolve("dst.img");
            Files.write(dst, new byte[4 << 20]);
            long modified = Files.getLastModifiedTime(dst).toMillis();

            Run run = Run.jnbd("copy", "--bitmap", "b0", disk, dst.toString());
            assertThat(run.exit()).as(run.toString()).isEqualTo(1);
            assertThat(run.err().strip()).isEqualTo("jnbd: no bitmap 'b0' on " + disk + "; it has none");
            assertThat(Files.size(dst)).isEqualTo(4 << 20);
            assertThat(Files.getLastModifiedTime(dst).toMillis()).isEqualTo(modified);
        }
    }

    @Test
    void aLocalSourceHasNoBitmap(@TempDir Path dir) throws Exception {
        Path src = Files.write(dir.resolve("src.img"), new byte[4096]);
        Run run = Run.jnbd("copy", "--bitmap", "b0", src.toString(), dir.resolve("dst.img").toString());
        assertThat(run.exit()).isEqualTo(2);
        assertThat(run.err()).startsWith("jnbd: --bitmap needs an NBD source");
        assertThat(dir.resolve("dst.img")).doesNotExist();
    }

    @Test
    void helpExplainsTheIncrementalCopyWithAnExample() {
        Run run = Run.jnbd("copy", "--help");
        assertThat(run.out()).contains("--bitmap=NAME", "qemu:dirty-bitmap:NAME", "never skipped",
            "qemu-nbd -r -t -f qcow2 -B b0", "jnbd copy --bitmap b0");
    }
}
