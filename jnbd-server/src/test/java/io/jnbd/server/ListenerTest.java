package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Listeners (TCP and Unix sockets) and exports whose size is not a multiple of any block size. */
@Timeout(60)
class ListenerTest {
    @TempDir
    Path dir;

    @Test
    void servesOverAUnixSocketAndRemovesItOnStop() throws IOException {
        Path sock = dir.resolve("jnbd.sock");
        NbdServer server = new NbdServer(new Exports(List.of(new Export("m", "", new MemoryBackend(1 << 20))), null),
            ServerConfig.defaults());
        try {
            server.listen(UnixDomainSocketAddress.of(sock));
            try (RawClient c = RawClient.open(UnixDomainSocketAddress.of(sock), "m", true, true)) {
                assertThat(c.write(0, pattern(1, 4096), Nbd.CMD_FLAG_FUA)).isZero();
                assertThat(c.read(0, 4096)).isEqualTo(pattern(1, 4096));
                c.disconnect();
            }
        } finally {
            server.stop(Duration.ofSeconds(10));
        }
        assertThat(Files.exists(sock)).isFalse();
    }

    /**
     * A server restarted in the same JVM gets its port back: stop returns only once the listening socket is gone,
     * not when the accept thread has merely been told to let go of it.
     */
    @Test
    void stopReleasesThePortBeforeItReturns() throws IOException {
        int port = 0;
        for (int round = 0; round < 200; round++) {
            NbdServer server = new NbdServer(new Exports(List.of(new Export("m", "", new MemoryBackend(4096))), null),
                ServerConfig.defaults());
            try {
                port = ((InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", port))).getPort();
            } finally {
                server.stop(Duration.ZERO);
            }
        }
    }

    @Test
    void theListenBacklogIsTheSystemsLimitUnlessSet() throws Exception {
        int somaxconn = Integer.parseInt(Files.readAllLines(Path.of("/proc/sys/net/core/somaxconn")).getFirst().strip());
        assertThat(listenBacklog(ServerConfig.defaults())).isEqualTo(Math.max(128, somaxconn));
        assertThat(listenBacklog(ServerConfig.defaults().withBacklog(77))).isEqualTo(77);
    }

    /** The backlog the kernel holds for a listener of a server with {@code config}: ss shows it as Send-Q. */
    private static int listenBacklog(ServerConfig config) throws Exception {
        NbdServer server = new NbdServer(new Exports(List.of(new Export("m", "", new MemoryBackend(1 << 20))), null), config);
        try {
            int port = ((InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0))).getPort();
            Process ss = new ProcessBuilder("ss", "-Hltn", "sport = :" + port).redirectErrorStream(true).start();
            String out = new String(ss.getInputStream().readAllBytes()).strip();
            assertThat(ss.waitFor()).as("ss: %s", out).isZero();
            return Integer.parseInt(out.split("\\s+")[2]); // State Recv-Q Send-Q Local Peer
        } finally {
            server.stop(Duration.ofSeconds(10));
        }
    }

    @Test
    void staleUnixSocketFileIsReplacedButALiveOneIsNot() throws IOException {
        Path sock = dir.resolve("stale.sock");
        // A socket file whose server is gone.
        try (ServerSocketChannel dead = ServerSocketChannel.open(StandardProtocolFamily.UNIX)) {
            dead.bind(UnixDomainSocketAddress.of(sock));
        }
        assertThat(Files.exists(sock)).isTrue();
        NbdServer server = new NbdServer(new Exports(List.of(new Export("m", "", new MemoryBackend(4096))), null),
            ServerConfig.defaults());
        try {
            server.listen(UnixDomainSocketAddress.of(sock));
            try (RawClient c = RawClient.open(UnixDomainSocketAddress.of(sock), "m")) {
                assertThat(c.size).isEqualTo(4096);
            }
            // A second server must not steal the live socket.
            NbdServer second = new NbdServer(new Exports(List.of(new Export("m", "", new MemoryBackend(4096))), null),
                ServerConfig.defaults());
            try {
                assertThatThrownBy(() -> second.listen(UnixDomainSocketAddress.of(sock))).isInstanceOf(IOException.class);
            } finally {
                second.stop(Duration.ofSeconds(5));
            }
            try (RawClient c = RawClient.open(UnixDomainSocketAddress.of(sock), "m")) {
                assertThat(c.read(0, 512)).hasSize(512);
            }
        } finally {
            server.stop(Duration.ofSeconds(10));
        }
    }

    @Test
    void portInUseIsAnIoException() throws IOException {
        try (ServerFixture fx = ServerFixture.memory(4096)) {
            NbdServer second = new NbdServer(new Exports(List.of(new Export("m", "", new MemoryBackend(4096))), null),
                ServerConfig.defaults());
            try {
                InetSocketAddress taken = (InetSocketAddress) fx.address;
                assertThatThrownBy(() -> second.listen(taken)).isInstanceOf(IOException.class);
            } finally {
                second.stop(Duration.ofSeconds(5));
            }
            try (RawClient c = fx.open("mem")) {
                assertThat(c.read(0, 512)).hasSize(512);
            }
        }
    }

    @Test
    void oddSizedExportsServeTheirLastByteAndNoMore() throws IOException {
        long size = (1 << 20) + 123;
        Path f = dir.resolve("odd.img");
        Files.write(f, pattern(9, (int) size));
        try (ServerFixture fx = new ServerFixture(List.of(
                new Export("mem", "", new MemoryBackend(size)),
                ExportSpec.parse("file", "file:" + f).openExport()))) {
            for (String e : List.of("mem", "file")) {
                try (RawClient c = fx.open(e, true, true)) {
                    assertThat(c.size).isEqualTo(size);
                    if (e.equals("mem")) assertThat(c.write(size - 200, java.util.Arrays.copyOfRange(pattern(9, (int) size), (int) size - 200, (int) size), 0)).isZero();
                    byte[] tail = c.read(size - 200, 200);
                    assertThat(tail).isEqualTo(java.util.Arrays.copyOfRange(pattern(9, (int) size), (int) size - 200, (int) size));
                    assertThat(c.readError(0, size - 200, 201)).isEqualTo(Nbd.EINVAL);
                    assertThat(c.write(size - 1, new byte[2], 0)).isEqualTo(Nbd.ENOSPC);
                    assertThat(c.write(size - 1, new byte[] {7}, Nbd.CMD_FLAG_FUA)).isZero();
                    // Block status up to the very end.
                    c.send(new Request(0, Nbd.CMD_BLOCK_STATUS, 1, size - 123, 123));
                    RawClient.Reply r = c.readReply();
                    assertThat(r.error()).isZero();
                    long covered = r.chunks().getFirst().blockStatus().descriptors().stream().mapToLong(d -> d.length()).sum();
                    assertThat(covered).isBetween(1L, 123L);
                    assertThat(c.command(Nbd.CMD_WRITE_ZEROES, 0, size - 123, 123)).isZero();
                    assertThat(c.read(size - 123, 123)).isEqualTo(new byte[123]);
                    assertThat(c.command(Nbd.CMD_TRIM, 0, size - 123, 123)).isZero();
                }
            }
        }
        assertThat(Files.size(f)).as("the file keeps its size").isEqualTo(size);
    }
}
