package io.jnbd.cli;

import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.RandomAccessFile;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/** info, copy and cmp against jnbd's own server, run in the same JVM: no peers needed. */
class ToolsOnJnbdServerTest {

    @Test
    void copyUpAndDownIsByteIdentical(@TempDir Path dir) throws Exception {
        Path src = dir.resolve("src.img");
        byte[] block = new byte[3 << 20];
        new Random(3).nextBytes(block);
        try (RandomAccessFile f = new RandomAccessFile(src.toFile(), "rw")) {
            f.setLength(32L << 20);
            f.seek(5L << 20);
            f.write(block);
        }
        List<Export> exports = List.of(ExportSpec.parse("disk=memory:32M").openExport(),
            ExportSpec.parse("split=file:" + src + ",split=64K,chunk=16K,streams=4,mode=direct").openExport());
        try (NbdServer server = new NbdServer(new Exports(exports, "disk"), ServerConfig.defaults())) {
            int port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))).getPort();
            String disk = "nbd://127.0.0.1:" + port + "/disk";

            Run info = Run.jnbd("info", "--json", disk);
            assertThat(info.out()).contains("\"size\": 33554432", "\"export\": \"disk\"");

            assertThat(Run.jnbd("copy", src.toString(), disk).exit()).isZero();
            Path back = dir.resolve("back.img");
            Run down = Run.jnbd("copy", "--connections", "3", disk, back.toString());
            assertThat(down.exit()).as(down.toString()).isZero();
            assertThat(Files.mismatch(src, back)).isEqualTo(-1);
            assertThat(Run.jnbd("cmp", src.toString(), disk).exit()).isZero();
            // The split export answers reads with out-of-order chunks.
            assertThat(Run.jnbd("cmp", "nbd://127.0.0.1:" + port + "/split", disk).exit()).isZero();
        }
    }
}
