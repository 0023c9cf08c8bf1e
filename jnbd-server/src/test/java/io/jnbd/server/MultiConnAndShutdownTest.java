package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Several connections to one export (multi-conn), and stopping the server with requests in flight. */
@Timeout(120)
class MultiConnAndShutdownTest {
    @TempDir
    Path dir;

    private Export export(String kind) throws IOException {
        return switch (kind) {
            case "mem" -> new Export("e", "", new MemoryBackend(64 << 20));
            case "cached" -> ExportSpec.parse("e", "file:" + dir.resolve("c.img") + ",size=64M").openExport();
            case "direct" -> ExportSpec.parse("e", "file:" + dir.resolve("d.img") + ",size=64M,mode=direct").openExport();
            default -> throw new IllegalArgumentException(kind);
        };
    }

    @ParameterizedTest
    @ValueSource(strings = {"mem", "cached", "direct"})
    void flushOnOneConnectionCoversWritesOfAnother(String kind) throws IOException {
        try (ServerFixture fx = new ServerFixture(List.of(export(kind)));
             RawClient a = fx.open("e"); RawClient b = fx.open("e", true, false)) {
            assertThat(a.transmissionFlags & Nbd.FLAG_CAN_MULTI_CONN).isNotZero();
            assertThat(b.transmissionFlags & Nbd.FLAG_CAN_MULTI_CONN).isNotZero();
            byte[] data = pattern(1, 1 << 20);
            assertThat(a.write(4096, data, 0)).isZero();
            assertThat(b.command(Nbd.CMD_FLUSH, 0, 0, 0)).isZero();
            assertThat(b.read(4096, data.length)).isEqualTo(data);
            // And the other way round, with a write acknowledged with FUA on B.
            byte[] more = pattern(2, 64 << 10);
            assertThat(b.write(8 << 20, more, Nbd.CMD_FLAG_FUA)).isZero();
            assertThat(a.read(8 << 20, more.length)).isEqualTo(more);
            assertThat(a.command(Nbd.CMD_FLUSH, 0, 0, 0)).isZero();
        }
    }

    @Test
    void cachedAndDirectExportsOfOneFileStayCoherent() throws IOException {
        Path f = dir.resolve("both.img");
        try (ServerFixture fx = new ServerFixture(List.of(
                ExportSpec.parse("c", "file:" + f + ",size=16M").openExport(),
                ExportSpec.parse("d", "file:" + f + ",mode=direct").openExport()));
             RawClient cached = fx.open("c"); RawClient direct = fx.open("d")) {
            byte[] one = pattern(3, 256 << 10);
            assertThat(cached.write(1 << 20, one, 0)).isZero();
            assertThat(direct.read(1 << 20, one.length)).isEqualTo(one);
            byte[] two = pattern(4, 256 << 10);
            assertThat(direct.write(2 << 20, two, 0)).isZero();
            assertThat(cached.read(2 << 20, two.length)).isEqualTo(two);
        }
    }

    /**
     * Many clients keep writes in flight while the server stops. Every write that was acknowledged must be in
     * the file afterwards; the rest may or may not be, but nothing may be torn into an acknowledged range.
     */
    @ParameterizedTest
    @ValueSource(strings = {"cached", "direct"})
    void stopWithWritesInFlightKeepsEveryAcknowledgedWrite(String mode) throws Exception {
        Path file = dir.resolve("stop-" + mode + ".img");
        int clients = 8, writesEach = 256, size = 64 << 10;
        Export export = ExportSpec.parse("e", "file:" + file + ",size=" + ((long) clients * writesEach * size) + ",mode=" + mode).openExport();
        ServerFixture fx = new ServerFixture(List.of(export));
        Set<Long> acknowledged = ConcurrentHashMap.newKeySet();
        AtomicInteger failedReplies = new AtomicInteger();
        List<Throwable> unexpected = java.util.Collections.synchronizedList(new ArrayList<>());
        CountDownLatch someAcknowledged = new CountDownLatch(clients * 4);
        List<Thread> threads = new ArrayList<>();
        List<RawClient> open = new ArrayList<>();
        try {
            for (int c = 0; c < clients; c++) {
                RawClient client = fx.open("e");
                open.add(client);
                int id = c;
                threads.add(Thread.ofPlatform().name("writer-" + c).start(() -> {
                    try {
                        for (int k = 0; k < writesEach; k++) {
                            long cookie = (long) id * writesEach + k;
                            client.send(new Request(k % 8 == 0 ? Nbd.CMD_FLAG_FUA : 0, Nbd.CMD_WRITE, cookie, cookie * size, size),
                                pattern(cookie, size));
                        }
                    } catch (IOException e) {
                        // the server stopped reading and closed: expected
                    }
                }));
                threads.add(Thread.ofPlatform().name("reader-" + c).start(() -> {
                    try {
                        while (true) {
                            RawClient.Reply r = client.readReply();
                            if (r.error() == 0) {
                                acknowledged.add(r.cookie());
                                someAcknowledged.countDown();
                            } else if (r.error() == Nbd.ESHUTDOWN) {
                                failedReplies.incrementAndGet();
                            } else {
                                unexpected.add(new AssertionError("write " + r.cookie() + " failed with " + Nbd.errorName(r.error())));
                            }
                        }
                    } catch (IOException e) {
                        // EOF once the server has answered what it read, or a reset: the end of this client
                    } catch (Throwable t) {
                        unexpected.add(t); // a malformed reply
                    }
                }));
            }
            assertThat(someAcknowledged.await(60, TimeUnit.SECONDS)).as("writes are being acknowledged").isTrue();
            fx.server.stop(Duration.ofSeconds(30));
            assertThat(fx.server.connectionCount()).isZero();
            for (Thread t : threads) {
                t.join(TimeUnit.SECONDS.toMillis(30));
                assertThat(t.isAlive()).as("%s ended", t.getName()).isFalse();
            }
        } finally {
            for (RawClient c : open) c.close();
            fx.close();
        }
        assertThat(unexpected).isEmpty();
        assertThat(acknowledged).isNotEmpty();
        try (FileChannel ch = FileChannel.open(file)) {
            for (long cookie : acknowledged) {
                ByteBuffer b = ByteBuffer.allocate(size);
                ch.read(b, cookie * size);
                assertThat(b.array()).as("acknowledged write %d", cookie).isEqualTo(pattern(cookie, size));
            }
        }
    }

    @Test
    void stopClosesIdleAndHandshakingClientsAndRefusesNewOnes() throws Exception {
        ServerFixture fx = new ServerFixture(List.of(new Export("e", "", new MemoryBackend(1 << 20))));
        try (RawClient idle = fx.open("e"); RawClient handshaking = RawClient.connect(fx.address)) {
            handshaking.greeting();
            fx.server.stop(Duration.ofSeconds(10));
            assertThat(idle.drainUntilClosed()).isTrue();
            assertThat(handshaking.drainUntilClosed()).isTrue();
            assertThat(fx.server.connectionCount()).isZero();
        }
        try (RawClient late = RawClient.connect(fx.address)) {
            throw new AssertionError("a stopped server accepted a connection");
        } catch (IOException expected) {
            // connection refused
        }
        fx.close(); // idempotent
    }

    /**
     * A stop that races the server's start (SIGTERM right after launch) neither throws nor leaves a port bound:
     * the listener comes up and is closed, or the start is refused.
     */
    @Test
    void stopRacingListenNeitherThrowsNorLeavesAPortBound() throws Exception {
        for (int round = 0; round < 300; round++) {
            NbdServer server = new NbdServer(new Exports(List.of(new Export("e", "", new MemoryBackend(4096))), null),
                ServerConfig.defaults());
            CountDownLatch go = new CountDownLatch(1);
            var bound = new java.util.concurrent.CompletableFuture<java.net.SocketAddress>();
            Thread starter = Thread.ofPlatform().start(() -> {
                try {
                    go.await();
                    bound.complete(server.listen(new java.net.InetSocketAddress("127.0.0.1", 0)));
                } catch (Throwable t) {
                    bound.completeExceptionally(t);
                }
            });
            go.countDown();
            // Spread the stop over the start so that some rounds land inside serve().
            if (round % 3 != 0) Thread.onSpinWait();
            server.stop(Duration.ofSeconds(5));
            starter.join(10_000);
            java.net.SocketAddress address;
            try {
                address = bound.get(10, TimeUnit.SECONDS);
            } catch (java.util.concurrent.ExecutionException e) {
                assertThat(e.getCause()).as("round %d", round).isInstanceOf(IOException.class).hasMessageContaining("stopping");
                continue;
            }
            try (RawClient late = RawClient.connect(address)) {
                throw new AssertionError("round " + round + ": a stopped server accepted a connection");
            } catch (IOException expected) {
                // connection refused
            }
        }
    }
}
