package io.jnbd.client;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@link ClientOptions#withReconnect}: against jnbd's server in this JVM, stopped and started again on the same port
 * (the connections are cut, as a crash cuts them), and against the fake server for what a real one does not do on
 * demand (ESHUTDOWN, a connection dropped on a FLUSH).
 */
@Timeout(120)
class ReconnectTest {

    private static final int BLOCK = 4096;

    @TempDir
    Path dir;
    private NbdServer server;
    private int port;

    @AfterEach
    void stop() {
        if (server != null) server.stop(Duration.ZERO);
    }

    /** Starts a server with the one export {@code disk=SPEC} on {@link #port} (a free one the first time). */
    private void serve(String spec) throws IOException {
        server = new NbdServer(new Exports(List.of(ExportSpec.parse("disk=" + spec).openExport()), "disk"), ServerConfig.defaults());
        port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), port))).getPort();
    }

    /** Cuts every connection at once, without answering what it has read, and stops listening. */
    private void crash() {
        server.stop(Duration.ZERO);
        server = null;
    }

    private URI uri() {
        return URI.create("nbd://127.0.0.1:" + port + "/disk");
    }

    private static ClientOptions reconnecting(Duration delay) {
        return ClientOptions.defaults().withReconnect(delay);
    }

    private static ByteBuffer pattern(long block, int round) {
        byte[] b = new byte[BLOCK];
        new Random(block * 7919 + round).nextBytes(b);
        return ByteBuffer.allocateDirect(BLOCK).put(b).flip();
    }

    @ParameterizedTest(name = "connections={0}")
    @ValueSource(ints = {1, 3})
    void everyAcknowledgedWriteReadsBackAcrossThreeCrashesAtQd16(int connections) throws Exception {
        Path image = dir.resolve("disk.img");
        serve("file:" + image + ",size=16M");
        int blocks = 4096;
        List<Integer> order = new ArrayList<>();
        for (int b = 0; b < blocks; b++) order.add(b);
        Collections.shuffle(order, new Random(connections));
        ClientOptions options = reconnecting(Duration.ofSeconds(30)).withConnections(connections);
        try (NbdClient c = NbdClient.connect(uri(), options)) {
            assertThat(c.connectionCount()).isEqualTo(connections);
            AtomicInteger acked = new AtomicInteger();
            List<Throwable> failures = new CopyOnWriteArrayList<>();
            Thread restarts = Thread.ofPlatform().name("restarts").start(() -> {
                try {
                    for (int i = 1; i <= 3; i++) {
                        while (acked.get() < i * blocks / 5 && failures.isEmpty()) Thread.sleep(1);
                        crash();
                        serve("file:" + image + ",size=16M");
                    }
                } catch (IOException | InterruptedException e) {
                    failures.add(e);
                }
            });
            Semaphore window = new Semaphore(16);
            for (int b : order) {
                window.acquire();
                c.write((long) b * BLOCK, pattern(b, 1), false).whenComplete((v, e) -> {
                    if (e != null) failures.add(e);
                    else acked.incrementAndGet();
                    window.release();
                });
            }
            window.acquire(16);
            restarts.join();
            assertThat(failures).isEmpty();
            assertThat(acked.get()).isEqualTo(blocks);
            assertThat(c.resent()).as("requests sent again after a crash").isPositive();
            c.flush().join();
        }
        // A client of its own, with nothing of the first one's state.
        try (NbdClient check = NbdClient.connect(uri())) {
            ByteBuffer got = ByteBuffer.allocateDirect(BLOCK);
            for (int b = 0; b < blocks; b++) {
                check.read((long) b * BLOCK, got.clear()).join();
                assertThat(got.flip()).as("block %d", b).isEqualTo(pattern(b, 1));
            }
        }
    }

    @Test
    void requestsMadeWhileTheServerIsAwayWaitForItsReturn() throws Exception {
        Path image = dir.resolve("disk.img");
        serve("file:" + image + ",size=1M");
        try (NbdClient c = NbdClient.connect(uri(), reconnecting(Duration.ofSeconds(60)))) {
            c.write(0, pattern(0, 2), false).join();
            crash();
            CompletableFuture<Void> write = c.write(BLOCK, pattern(1, 2), false);
            CompletableFuture<Void> flush = write.thenCompose(v -> c.flush());
            ByteBuffer got = ByteBuffer.allocateDirect(BLOCK);
            CompletableFuture<Void> read = c.read(0, got);
            assertThat(write).isNotDone(); // nowhere to go: no server listens
            assertThat(read).isNotDone();
            assertThat(c.connected()).isTrue(); // away, not given up
            serve("file:" + image + ",size=1M");
            flush.join();
            read.join();
            assertThat(got.flip()).isEqualTo(pattern(0, 2));
            ByteBuffer again = ByteBuffer.allocateDirect(BLOCK);
            c.read(BLOCK, again).join();
            assertThat(again.flip()).isEqualTo(pattern(1, 2));
        }
    }

    @Test
    void aServerThatAcceptsAndClosesIsTriedWithBackoffAndGivenUpOnAtTheDelay() throws Exception {
        serve("file:" + dir.resolve("disk.img") + ",size=1M");
        try (NbdClient c = NbdClient.connect(uri(), reconnecting(Duration.ofSeconds(1)))) {
            crash();
            AtomicInteger accepted = new AtomicInteger();
            try (ServerSocket slam = new ServerSocket()) {
                slam.setReuseAddress(true);
                slam.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
                Thread.ofPlatform().daemon().start(() -> {
                    while (!slam.isClosed()) {
                        try (Socket s = slam.accept()) {
                            accepted.incrementAndGet();
                        } catch (IOException e) {
                            return;
                        }
                    }
                });
                long start = System.nanoTime();
                CompletableFuture<Void> write = c.write(0, pattern(0, 3), false);
                assertThatThrownBy(write::join).isInstanceOf(CompletionException.class)
                    .cause().isInstanceOf(NbdConnectionException.class)
                    .hasMessageContaining("did not come back within the reconnect delay of 1000 ms")
                    .hasMessageContaining("127.0.0.1:" + port);
                assertThat(Duration.ofNanos(System.nanoTime() - start)).isLessThan(Duration.ofSeconds(30));
                // Tried again and again, with pauses that grow (10 ms, doubling): not a busy loop.
                assertThat(accepted.get()).isBetween(2, 20);
                // Given up for good: later requests fail at once, with the same reason.
                assertThatThrownBy(() -> c.read(0, ByteBuffer.allocate(BLOCK)).join())
                    .hasMessageContaining("did not come back within the reconnect delay");
                assertThat(c.connected()).isFalse();
            }
        }
    }

    @Test
    void aServerBackWithAnotherSizeGetsNoWrite() throws Exception {
        Path image = dir.resolve("disk.img");
        serve("file:" + image + ",size=1M");
        try (NbdClient c = NbdClient.connect(uri(), reconnecting(Duration.ofSeconds(30)))) {
            c.write(0, pattern(0, 4), false).join();
            crash();
            serve("file:" + image + ",size=2M"); // the same file, grown
            CompletableFuture<Void> write = c.write(BLOCK, pattern(1, 4), false);
            assertThatThrownBy(write::join).cause().isInstanceOf(NbdConnectionException.class)
                .hasMessage("server at 127.0.0.1:" + port + " came back with a different export: size 2097152,"
                    + " was 1048576; no request was sent to it");
            assertThatThrownBy(() -> c.write(2 * BLOCK, pattern(2, 4), false).join())
                .hasMessageContaining("came back with a different export");
        }
        byte[] disk = Files.readAllBytes(image);
        assertThat(ByteBuffer.wrap(disk, 0, BLOCK)).isEqualTo(pattern(0, 4));
        assertThat(ByteBuffer.wrap(disk, BLOCK, 2 * BLOCK)).isEqualTo(ByteBuffer.allocate(2 * BLOCK));
    }

    @Test
    void aServerBackReadOnlyIsAnotherExport() throws Exception {
        Path image = dir.resolve("disk.img");
        serve("file:" + image + ",size=1M");
        try (NbdClient c = NbdClient.connect(uri(), reconnecting(Duration.ofSeconds(30)))) {
            crash();
            serve("file:" + image + ",readonly");
            assertThatThrownBy(() -> c.write(0, pattern(0, 9), false).join()).cause()
                .hasMessageEndingWith("came back with a different export: read-only, was writable; no request was sent to it");
        }
    }

    @Test
    void aRestartedMemoryExportIsAnotherExportThoughItsSizeIsTheSame() throws Exception {
        serve("memory:1M");
        try (NbdClient c = NbdClient.connect(uri(), reconnecting(Duration.ofSeconds(30)))) {
            c.write(0, pattern(0, 5), false).join();
            crash();
            serve("memory:1M");
            assertThatThrownBy(() -> c.write(BLOCK, pattern(1, 5), false).join())
                .cause().isInstanceOf(NbdConnectionException.class)
                .hasMessageMatching("server at 127\\.0\\.0\\.1:\\d+ came back with a different export: jnbd:identity:\\p{XDigit}+,"
                    + " was jnbd:identity:\\p{XDigit}+; no request was sent to it");
        }
        try (NbdClient check = NbdClient.connect(uri())) {
            ByteBuffer got = ByteBuffer.allocateDirect(2 * BLOCK);
            check.read(0, got).join();
            assertThat(got.flip()).isEqualTo(ByteBuffer.allocate(2 * BLOCK));
        }
    }

    @Test
    void aRequestAnsweredWithEshutdownIsSentAgainOnANewConnection() throws Exception {
        byte[] disk = new byte[1 << 20];
        try (FakeNbdServer fake = new FakeNbdServer(disk, FakeNbdServer.Mode.GOING_AWAY);
             NbdClient c = NbdClient.connect(fake.uri(), reconnecting(Duration.ofSeconds(30)))) {
            c.write(2 * BLOCK, pattern(2, 6), false).join();
            assertThat(ByteBuffer.wrap(disk, 2 * BLOCK, BLOCK)).isEqualTo(pattern(2, 6));
            List<Request> writes = fake.received.stream().filter(r -> r.type() == Nbd.CMD_WRITE).toList();
            assertThat(writes).hasSize(2).allMatch(r -> r.offset() == 2 * BLOCK && r.length() == BLOCK);
        }
    }

    @Test
    void aFlushWithoutAnswerIsSentAgain() throws Exception {
        byte[] disk = new byte[1 << 20];
        try (FakeNbdServer fake = new FakeNbdServer(disk, FakeNbdServer.Mode.DROP_ONCE);
             NbdClient c = NbdClient.connect(fake.uri(), reconnecting(Duration.ofSeconds(30)))) {
            c.flush().join();
            assertThat(fake.received).extracting(Request::type).containsExactly(Nbd.CMD_FLUSH, Nbd.CMD_FLUSH);
        }
    }

    @Test
    void anErrorReplyIsTheCallersAndNotAReasonToReconnect() throws Exception {
        byte[] disk = FakeNbdServer.content(1 << 20);
        try (FakeNbdServer fake = new FakeNbdServer(disk, FakeNbdServer.Mode.ERROR);
             NbdClient c = NbdClient.connect(fake.uri(), reconnecting(Duration.ofSeconds(30)))) {
            assertThatThrownBy(() -> c.read(0, ByteBuffer.allocate(BLOCK)).join())
                .cause().isInstanceOf(NbdErrorException.class).hasMessageContaining("EIO");
            assertThat(fake.reads.get()).isEqualTo(1);
            fake.mode(FakeNbdServer.Mode.REVERSE);
            ByteBuffer got = ByteBuffer.allocate(BLOCK);
            c.read(0, got).join();
            assertThat(got.flip()).isEqualTo(ByteBuffer.wrap(disk, 0, BLOCK));
        }
    }

    @Test
    void aProtocolViolationEndsTheConnectionForGood() throws Exception {
        byte[] disk = FakeNbdServer.content(1 << 20);
        try (FakeNbdServer fake = new FakeNbdServer(disk, FakeNbdServer.Mode.BAD_MAGIC);
             NbdClient c = NbdClient.connect(fake.uri(), reconnecting(Duration.ofSeconds(30)))) {
            assertThatThrownBy(() -> c.read(0, ByteBuffer.allocate(BLOCK)).join())
                .cause().isInstanceOf(NbdProtocolException.class);
            fake.mode(FakeNbdServer.Mode.REVERSE);
            assertThat(c.connected()).isFalse();
            assertThatThrownBy(() -> c.read(0, ByteBuffer.allocate(BLOCK)).join())
                .cause().isInstanceOf(NbdProtocolException.class);
            assertThat(fake.reads.get()).isEqualTo(1);
        }
    }

    @Test
    void closingWhileTheServerIsAwayFailsTheWaitingRequestsAndStopsTrying() throws Exception {
        serve("file:" + dir.resolve("disk.img") + ",size=1M");
        NbdClient c = NbdClient.connect(uri(), reconnecting(Duration.ofSeconds(60)));
        crash();
        CompletableFuture<Void> write = c.write(0, pattern(0, 7), false);
        c.close();
        assertThatThrownBy(write::join).cause().isInstanceOf(NbdConnectionException.class)
            .hasMessageContaining("closed by the client");
        assertThat(Thread.getAllStackTraces().keySet()).noneMatch(t -> t.getName().startsWith("jnbd-redial-") && t.isAlive());
    }

    @Test
    void withoutReconnectALostConnectionFailsItsRequestsAsBefore() throws Exception {
        serve("file:" + dir.resolve("disk.img") + ",size=1M");
        try (NbdClient c = NbdClient.connect(uri())) {
            crash();
            serve("file:" + dir.resolve("disk.img") + ",size=1M");
            assertThatThrownBy(() -> c.write(0, pattern(0, 8), false).join())
                .cause().isInstanceOf(NbdConnectionException.class);
            assertThat(c.connected()).isFalse();
        }
    }
}
