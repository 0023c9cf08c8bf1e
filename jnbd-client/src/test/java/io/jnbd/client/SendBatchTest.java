package io.jnbd.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.server.Export;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.backend.MemoryBackend;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A batch holds a thread's requests until it ends and then sends them; from a virtual thread (a server's
 * connection forwarding, as the pool and the nbd: proxy do) they go out on that thread without the JDK's socket
 * write, so the client's sockets stay in blocking mode.
 */
@Timeout(60)
class SendBatchTest {
    private static final int BLOCK = 4096;

    private NbdServer server;
    private NbdClient client;
    private int port;

    @BeforeEach
    void start() throws Exception {
        server = new NbdServer(new Exports(List.of(new Export("m", "", new MemoryBackend(16 << 20))), null),
            ServerConfig.defaults());
        InetSocketAddress a = (InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0));
        port = a.getPort();
        client = NbdClient.connect(URI.create("nbd://127.0.0.1:" + port + "/m"), ClientOptions.defaults().withConnections(2));
    }

    @AfterEach
    void stop() {
        if (client != null) client.close();
        server.stop(Duration.ofSeconds(5));
    }

    @Test
    void aBatchOnAVirtualThreadHoldsItsRequestsUntilItEndsAndTheSocketsStayBlocking() throws Throwable {
        onVirtualThread(() -> {
            List<CompletableFuture<Void>> writes = new ArrayList<>();
            SendBatch.begin();
            try {
                for (int i = 0; i < 64; i++) {
                    // heap and direct payloads both: a heap one is copied for the native write
                    ByteBuffer b = i % 2 == 0 ? ByteBuffer.allocateDirect(BLOCK) : ByteBuffer.allocate(BLOCK);
                    fill(b, i);
                    writes.add(client.write((long) i * BLOCK, b.flip(), false));
                }
                for (CompletableFuture<Void> w : writes) assertThat(w).as("a write held in the batch").isNotDone();
            } finally {
                SendBatch.end();
            }
            CompletableFuture.allOf(writes.toArray(CompletableFuture[]::new)).get(20, TimeUnit.SECONDS);

            List<ByteBuffer> reads = new ArrayList<>();
            List<CompletableFuture<Void>> done = new ArrayList<>();
            SendBatch.begin();
            try {
                for (int i = 0; i < 64; i++) {
                    ByteBuffer b = ByteBuffer.allocateDirect(BLOCK);
                    reads.add(b);
                    done.add(client.read((long) i * BLOCK, b));
                }
            } finally {
                SendBatch.end();
            }
            CompletableFuture.allOf(done.toArray(CompletableFuture[]::new)).get(20, TimeUnit.SECONDS);
            for (int i = 0; i < 64; i++) {
                ByteBuffer expected = fill(ByteBuffer.allocate(BLOCK), i).flip();
                assertThat(reads.get(i).clear()).as("block " + i).isEqualTo(expected);
            }
        });
        for (SocketChannel ch : client.channels()) {
            assertThat(Tests.fileStatusFlags(ch) & Tests.O_NONBLOCK).as("O_NONBLOCK on the client's socket").isZero();
        }
    }

    @Test
    void batchesNestAndOnlyTheOutermostEndSends() throws Throwable {
        onVirtualThread(() -> {
            CompletableFuture<Void> read;
            SendBatch.begin();
            try {
                SendBatch.begin();
                read = client.read(0, ByteBuffer.allocateDirect(BLOCK));
                SendBatch.end();
                assertThat(read).as("after the inner end").isNotDone();
            } finally {
                SendBatch.end();
            }
            read.get(20, TimeUnit.SECONDS);
        });
    }

    @Test
    void sendHeldLetsTheBatchWaitForItsOwnRequest() throws Throwable {
        onVirtualThread(() -> {
            SendBatch.begin();
            try {
                ByteBuffer b = fill(ByteBuffer.allocateDirect(BLOCK), 7).flip();
                CompletableFuture<Void> w = client.write(0, b, false);
                SendBatch.sendHeld();
                w.get(20, TimeUnit.SECONDS); // held, it would never complete
                CompletableFuture<Void> later = client.read(0, ByteBuffer.allocateDirect(BLOCK));
                assertThat(later).as("a request after sendHeld is held again").isNotDone();
            } finally {
                SendBatch.end();
            }
        });
    }

    /**
     * Several threads ending batches on one connection while its reader sends what callbacks submitted: each
     * takes requests out of the same held list, and none may be lost between them (a request peeked at by one
     * and taken by the other once left the next one behind, answered never: the pool's fio run hung).
     */
    @Test
    void noRequestIsLostWhenBatchesAndTheReaderSendTogether() throws Exception {
        try (NbdClient one = NbdClient.connect(URI.create("nbd://127.0.0.1:" + port + "/m"), ClientOptions.defaults())) {
            List<CompletableFuture<Void>> all = java.util.Collections.synchronizedList(new ArrayList<>());
            List<Thread> threads = new ArrayList<>();
            for (int t = 0; t < 6; t++) {
                int seed = t;
                threads.add(Thread.ofVirtual().start(() -> {
                    for (int round = 0; round < 150; round++) {
                        SendBatch.begin();
                        try {
                            for (int i = 0; i < 6; i++) {
                                long at = (long) ((seed * 997 + round * 31 + i) % 4096) * BLOCK;
                                // a callback on the reader thread submits too: the reader's own held requests
                                all.add(one.read(at, ByteBuffer.allocateDirect(BLOCK))
                                    .thenCompose(v -> one.read(at, ByteBuffer.allocateDirect(BLOCK))));
                            }
                        } finally {
                            SendBatch.end();
                        }
                    }
                }));
            }
            for (Thread t : threads) t.join();
            CompletableFuture.allOf(all.toArray(CompletableFuture[]::new)).get(40, TimeUnit.SECONDS);
            assertThat(all).hasSize(6 * 150 * 6).allMatch(f -> f.isDone() && !f.isCompletedExceptionally());
        }
    }

    @Test
    void endWithoutBeginIsAnError() {
        assertThatThrownBy(SendBatch::end).isInstanceOf(IllegalStateException.class);
    }

    @Test
    void aBatchHoldsOnlyItsOwnThreadsRequests() throws Throwable {
        SendBatch.begin();
        try {
            CompletableFuture<Void> other = new CompletableFuture<>();
            Thread.ofPlatform().start(() -> client.read(0, ByteBuffer.allocateDirect(BLOCK))
                .whenComplete((v, e) -> { if (e == null) other.complete(null); else other.completeExceptionally(e); }));
            other.get(20, TimeUnit.SECONDS);
        } finally {
            SendBatch.end();
        }
    }

    private interface Body {
        void run() throws Throwable;
    }

    private static void onVirtualThread(Body body) throws Throwable {
        CompletableFuture<Void> result = new CompletableFuture<>();
        Thread.ofVirtual().start(() -> {
            try {
                body.run();
                result.complete(null);
            } catch (Throwable t) {
                result.completeExceptionally(t);
            }
        });
        try {
            result.get(40, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            throw e.getCause();
        }
    }

    private static ByteBuffer fill(ByteBuffer b, int seed) {
        for (int j = 0; j < BLOCK; j += 4) b.putInt(seed * 7919 + j);
        return b;
    }
}
