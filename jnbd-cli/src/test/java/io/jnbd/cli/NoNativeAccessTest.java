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
 * Native functions are linked on first use (NativeIo, Splice and NativeSend hold each in a class of its own);
 * whether they can be linked is decided up front by linking one. Where native access is denied, that probe must
 * say no and every caller keep to the JDK's calls: copies to a file (no write-behind), between servers (buffers,
 * not splice) and from a file still finish with the right bytes, and no link is attempted later.
 */
class NoNativeAccessTest {

    @Test
    void copiesWorkWhereNativeAccessIsDenied(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("src.img");
        byte[] data = new byte[8 << 20];
        new Random(5).nextBytes(data);
        Files.write(file, data);
        Path back = dir.resolve("back.img");
        var exports = List.of(ExportSpec.parse("a=memory:8M").openExport(), ExportSpec.parse("b=memory:8M").openExport());
        try (NbdServer server = new NbdServer(new Exports(exports, "a"), ServerConfig.defaults())) {
            int port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))).getPort();
            String a = "nbd://127.0.0.1:" + port + "/a", b = "nbd://127.0.0.1:" + port + "/b";

            copyWithoutNativeAccess(file.toString(), a);
            copyWithoutNativeAccess(a, b);
            copyWithoutNativeAccess(b, back.toString());

            assertThat(Files.readAllBytes(back)).isEqualTo(data);
        }
    }

    private static void copyWithoutNativeAccess(String from, String to) throws Exception {
        // The sockets' descriptors stay reachable (--add-exports), so only the linking probe can turn splice off.
        Run r = Run.jnbdInJvm(List.of("--illegal-native-access=deny", "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"),
            "copy", "--no-progress", from, to);
        assertThat(r.exit()).as("copy %s -> %s ended", from, to).isNotEqualTo(-1);
        assertThat(r.exit()).as("copy %s -> %s: %s", from, to, r.out()).isZero();
        assertThat(r.out()).as("copy %s -> %s", from, to).doesNotContain("Exception", "WARNING");
    }
}
