package io.jnbd.cli;

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
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Chunks that never pass through jnbd copy (sendfile from a file, splice between servers) take no buffer: such
 * copies run in a JVM allowed 16 MiB of direct memory, where the default window of 4 × 32 × 1 MiB does not fit.
 */
class CopyMemoryTest {

    @Test
    void zeroCopyPathsFitInADirectMemoryLimitSmallerThanTheWindow(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("src.img");
        byte[] data = new byte[64 << 20];
        new Random(11).nextBytes(data);
        Files.write(file, data);
        var exports = List.of(ExportSpec.parse("a=memory:64M").openExport(), ExportSpec.parse("b=memory:64M").openExport());
        try (NbdServer server = new NbdServer(new Exports(exports, "a"), ServerConfig.defaults())) {
            int port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))).getPort();
            String a = "nbd://127.0.0.1:" + port + "/a", b = "nbd://127.0.0.1:" + port + "/b";

            copyInSmallJvm(file.toString(), a);
            copyInSmallJvm(a, b);

            assertThat(Run.jnbd("cmp", file.toString(), b).exit()).isZero();
        }
    }

    private static void copyInSmallJvm(String from, String to) throws Exception {
        Run r = Run.jnbdInJvm(List.of("-XX:MaxDirectMemorySize=16m", "--enable-native-access=ALL-UNNAMED",
            "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"), "copy", "--no-progress", from, to);
        assertThat(r.exit()).as("copy %s -> %s ended", from, to).isNotEqualTo(-1);
        assertThat(r.exit()).as("copy %s -> %s: %s", from, to, r.out()).isZero();
    }
}
