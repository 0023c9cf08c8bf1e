package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The server under its tightest settings: a window of one request, one I/O thread, a connection limit. */
@Timeout(60)
class ServerConfigVariantsTest {

    private static List<Export> memory() {
        return List.of(new Export("m", "", new MemoryBackend(64 << 20)));
    }

    @Test
    void windowOfOneStillServesADeepPipeline() throws IOException {
        ServerConfig config = ServerConfig.defaults().withRequestsInFlight(1).withIoThreads(1);
        try (ServerFixture fx = new ServerFixture(memory(), config); RawClient c = fx.open("m", true, false)) {
            int n = 200;
            // Writes, invalid requests and flushes interleaved, all sent before any reply is read.
            for (int i = 0; i < n; i++) {
                switch (i % 4) {
                    case 0, 1 -> c.send(new Request(0, Nbd.CMD_WRITE, i, i * 4096L, 4096), pattern(i, 4096));
                    case 2 -> c.send(new Request(0, 99, i, 0, 0));
                    default -> c.send(new Request(0, Nbd.CMD_FLUSH, i, 0, 0));
                }
            }
            Set<Long> seen = new HashSet<>();
            for (int i = 0; i < n; i++) {
                RawClient.Reply r = c.readReply();
                assertThat(seen.add(r.cookie())).isTrue();
                assertThat(r.error()).as("cookie %d", r.cookie()).isEqualTo(r.cookie() % 4 == 2 ? Nbd.EINVAL : 0);
            }
            for (int i = 0; i < n; i += 4) {
                assertThat(c.read(i * 4096L, 4096)).isEqualTo(pattern(i, 4096));
                assertThat(c.read((i + 1) * 4096L, 4096)).isEqualTo(pattern(i + 1, 4096));
            }
        }
    }

    @Test
    void eachWithMethodChangesOnlyItsOwnSetting() {
        ServerConfig d = ServerConfig.defaults();
        // Changing one setting and restoring it gives the defaults back only if nothing else moved.
        assertThat(d.withHandshakeTimeout(java.time.Duration.ofSeconds(3)).handshakeTimeout()).hasSeconds(3);
        assertThat(d.withHandshakeTimeout(java.time.Duration.ofSeconds(3)).withHandshakeTimeout(d.handshakeTimeout())).isEqualTo(d);
        assertThat(d.withRequestsInFlight(7).requestsInFlight()).isEqualTo(7);
        assertThat(d.withRequestsInFlight(7).withRequestsInFlight(d.requestsInFlight())).isEqualTo(d);
        assertThat(d.withIoThreads(3).ioThreads()).isEqualTo(3);
        assertThat(d.withIoThreads(3).withIoThreads(d.ioThreads())).isEqualTo(d);
        assertThat(d.withSendTimeout(java.time.Duration.ofSeconds(9)).withSendTimeout(d.sendTimeout())).isEqualTo(d);
        assertThat(d.withBusyPoll(java.time.Duration.ZERO).busyPoll()).isZero();
        assertThat(d.withBusyPoll(java.time.Duration.ZERO).withBusyPoll(d.busyPoll())).isEqualTo(d);
        assertThat(d.withSendBuffer(1 << 20).withSendBuffer(d.sendBuffer())).isEqualTo(d);
        assertThat(d.withBufferBudget(1 << 20).bufferBudget()).isEqualTo(1 << 20);
        assertThat(d.withBufferBudget(1 << 20).withBufferBudget(d.bufferBudget())).isEqualTo(d);
        assertThat(d.withReceiveTimeout(java.time.Duration.ofSeconds(2)).receiveTimeout()).hasSeconds(2);
        assertThat(d.withReceiveTimeout(java.time.Duration.ofSeconds(2)).withReceiveTimeout(d.receiveTimeout())).isEqualTo(d);
        assertThat(d.withBacklog(17).backlog()).isEqualTo(17);
        assertThat(d.withBacklog(17).withBacklog(d.backlog())).isEqualTo(d);
        assertThat(d.withMaxConnections(5).withMaxConnections(d.maxConnections())).isEqualTo(d);
    }

    @Test
    void theSendBufferIsFixedForPlainClientsOnThisHostAndLeftToTheKernelForOthersUnlessSet() throws Exception {
        ServerConfig auto = ServerConfig.defaults();
        assertThat(auto.sendBufferFor(false, () -> true)).isEqualTo(ServerConfig.LOCAL_SEND_BUFFER);
        assertThat(auto.sendBufferFor(false, () -> false)).as("autotuning for remote clients").isZero();
        assertThat(auto.sendBufferFor(true, () -> true)).as("autotuning under TLS, which caps the unsent bytes instead").isZero();
        ServerConfig kernel = auto.withSendBuffer(ServerConfig.SEND_BUFFER_KERNEL);
        assertThat(kernel.sendBufferFor(false, () -> true)).isZero();
        ServerConfig fixed = auto.withSendBuffer(1 << 20);
        assertThat(fixed.sendBufferFor(false, () -> true)).isEqualTo(1 << 20);
        assertThat(fixed.sendBufferFor(true, () -> false)).isEqualTo(1 << 20);
        assertThatThrownBy(() -> auto.withSendBuffer(-2)).isInstanceOf(IllegalArgumentException.class);

        assertThat(io.jnbd.server.net.Listener.onThisHost(java.net.InetAddress.getByName("127.0.0.1"))).isTrue();
        assertThat(io.jnbd.server.net.Listener.onThisHost(java.net.InetAddress.getByName("::1"))).isTrue();
        assertThat(io.jnbd.server.net.Listener.onThisHost(java.net.InetAddress.getByName("192.0.2.1"))).as("TEST-NET-1").isFalse();
    }

    @Test
    void aFixedSmallSendBufferStillCarriesLargeReadsWhole() throws Exception {
        ServerConfig config = ServerConfig.defaults().withSendBuffer(16 << 10);
        try (ServerFixture fx = new ServerFixture(memory(), config); RawClient c = fx.open("m")) {
            byte[] data = pattern(5, 4 << 20);
            assertThat(c.write(0, data, 0)).isZero();
            assertThat(c.read(0, data.length)).isEqualTo(data);
            c.disconnect();
        }
    }

    @Test
    void connectionsBeyondTheLimitAreRefusedAndTheLimitFreesUp() throws Exception {
        ServerConfig config = ServerConfig.defaults().withMaxConnections(2);
        try (ServerFixture fx = new ServerFixture(memory(), config)) {
            RawClient a = fx.open("m");
            RawClient b = fx.open("m");
            try (RawClient refused = RawClient.connect(fx.address)) {
                assertThat(refused.drainUntilClosed()).as("the third connection is closed at once").isTrue();
            }
            assertThat(a.read(0, 512)).hasSize(512);
            a.disconnect();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (fx.server.connectionCount() > 1 && System.nanoTime() < deadline) Thread.sleep(10);
            try (RawClient c = fx.open("m")) {
                assertThat(c.read(0, 512)).hasSize(512);
            }
            assertThat(b.read(0, 512)).hasSize(512);
            b.close();
        }
    }

    @Test
    void oneIoThreadServesManyConnections() throws Exception {
        try (ServerFixture fx = new ServerFixture(memory(), ServerConfig.defaults().withIoThreads(1))) {
            List<RawClient> clients = new java.util.ArrayList<>();
            try {
                for (int i = 0; i < 8; i++) clients.add(fx.open("m", i % 2 == 0, false));
                for (int i = 0; i < 8; i++) {
                    RawClient c = clients.get(i);
                    for (int k = 0; k < 16; k++) c.send(new Request(0, Nbd.CMD_WRITE, k, (i * 16L + k) << 16, 65536), pattern(i * 16L + k, 65536));
                }
                for (RawClient c : clients) for (int k = 0; k < 16; k++) assertThat(c.readReply().error()).isZero();
                for (int i = 0; i < 8; i++) {
                    assertThat(clients.get(i).read((i * 16L + 5) << 16, 65536)).isEqualTo(pattern(i * 16L + 5, 65536));
                }
            } finally {
                for (RawClient c : clients) c.close();
            }
        }
    }

    @Test
    void stopIsIdempotentAndQuickWhenIdle() throws IOException {
        ServerFixture fx = new ServerFixture(memory(), ServerConfig.defaults());
        long t0 = System.nanoTime();
        fx.server.stop(Duration.ofSeconds(30));
        fx.server.stop(Duration.ofSeconds(30));
        fx.close();
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(Duration.ofSeconds(20));
    }
}
