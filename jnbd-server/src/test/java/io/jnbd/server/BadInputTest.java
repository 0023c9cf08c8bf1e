package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Bad input in the transmission phase: each gets the protocol's error or a clean close of that connection
 * only, without unbounded allocation, while the server keeps serving everyone else.
 */
@Timeout(120)
class BadInputTest {
    static final long SIZE = 1L << 30; // sparse: costs only what is written
    ServerFixture fx;

    @BeforeEach
    void start() throws IOException {
        fx = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(SIZE))));
    }

    @AfterEach
    void stop() {
        fx.close();
    }

    /** A client connected before the bad one must still work after it. */
    private static void assertWorks(RawClient c, long seed) throws IOException {
        byte[] d = pattern(seed, 8192);
        long at = (seed % 1000) * 8192;
        assertThat(c.write(at, d, 0)).isZero();
        assertThat(c.read(at, d.length)).isEqualTo(d);
    }

    @Test
    void badRequestMagicClosesOnlyThatConnection() throws IOException {
        try (RawClient good = fx.open("mem"); RawClient bad = fx.open("mem")) {
            assertWorks(bad, 1);
            ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE);
            new Request(0, Nbd.CMD_READ, 1, 0, 4096).encode(b);
            b.putInt(0, Nbd.SIMPLE_REPLY_MAGIC);
            bad.write(b.flip());
            assertThat(bad.closedByPeer()).isTrue();
            assertWorks(good, 2);
        }
    }

    @Test
    void writeClaimingAGigabyteClosesTheConnectionWithoutAllocatingIt() throws Exception {
        try (RawClient good = fx.open("mem"); RawClient bad = fx.open("mem")) {
            ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE);
            new Request(0, Nbd.CMD_WRITE, 1, 0, 1L << 30).encode(b);
            bad.write(b.flip());
            bad.write(new byte[64 << 10]); // a little of the promised payload, then nothing
            // The server must not wait for a gigabyte: it hangs up at once.
            assertThat(bad.closedByPeer()).isTrue();
            assertThat(fx.server.buffers().outstandingBytes()).isLessThan(64L << 20);
            assertWorks(good, 3);
        }
        try (RawClient again = fx.open("mem")) {
            assertWorks(again, 4);
        }
    }

    @Test
    void writeJustOverTheMaximumPayloadIsRefusedAndTheSessionContinues() throws IOException {
        try (RawClient c = fx.open("mem", true, false)) {
            int length = (32 << 20) + 4096;
            byte[] payload = new byte[length];
            assertThat(c.call(new Request(0, Nbd.CMD_WRITE, 7, 0, length), payload)).isIn(Nbd.EOVERFLOW, Nbd.EINVAL);
            // The payload was drained, not taken for requests: the stream is still in step.
            assertWorks(c, 5);
            assertThat(c.read(0, 4096)).isEqualTo(new byte[4096]);
        }
    }

    @Test
    void garbageBytesCloseTheConnectionAndNothingElse() throws IOException {
        Random random = new Random(42);
        try (RawClient good = fx.open("mem")) {
            for (int i = 0; i < 20; i++) {
                try (RawClient bad = fx.open("mem")) {
                    byte[] junk = new byte[28 + random.nextInt(4096)];
                    random.nextBytes(junk);
                    junk[0] = (byte) 0xAA; // never the request magic
                    bad.write(junk);
                    assertThat(bad.drainUntilClosed()).isTrue();
                }
            }
            assertWorks(good, 6);
        }
        // Garbage instead of the handshake.
        for (int i = 0; i < 5; i++) {
            try (RawClient bad = RawClient.connect(fx.address)) {
                byte[] junk = new byte[100];
                random.nextBytes(junk);
                bad.write(junk);
                assertThat(bad.drainUntilClosed()).isTrue();
            }
        }
        try (RawClient c = fx.open("mem")) {
            assertWorks(c, 7);
        }
    }

    @Test
    void truncatedRequestOrPayloadThenEofIsAClose() throws Exception {
        try (RawClient c = fx.open("mem")) {
            c.write(new byte[] {0x25, 0x60, (byte) 0x95, 0x13, 0, 0});
            c.channel.shutdownOutput();
            assertThat(c.closedByPeer()).isTrue();
        }
        try (RawClient c = fx.open("mem")) {
            ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE);
            new Request(0, Nbd.CMD_WRITE, 1, 0, 65536).encode(b);
            c.write(b.flip());
            c.write(new byte[1000]);
            c.channel.shutdownOutput();
            assertThat(c.closedByPeer()).isTrue();
        }
        awaitNoOutstandingBuffers();
        try (RawClient c = fx.open("mem")) {
            assertWorks(c, 8);
        }
    }

    @Test
    void halfClosedSocketStillGetsItsReplies() throws IOException {
        try (RawClient c = fx.open("mem", true, false)) {
            byte[] d = pattern(9, 128 << 10);
            c.send(new Request(Nbd.CMD_FLAG_FUA, Nbd.CMD_WRITE, 1, 0, d.length), d);
            c.send(new Request(0, Nbd.CMD_FLUSH, 2, 0, 0));
            List<Long> reads = new ArrayList<>();
            for (int i = 0; i < 8; i++) {
                c.send(new Request(0, Nbd.CMD_READ, 100 + i, 0, d.length));
                reads.add(100L + i);
            }
            c.channel.shutdownOutput(); // no more requests, and no DISC
            // Replies may come in any order; the write was sent first, so reads see it only if ordered after it
            // completes — we do not rely on that, only on every reply arriving.
            java.util.Set<Long> answered = new java.util.HashSet<>();
            for (int i = 0; i < 10; i++) {
                RawClient.Chunk first = c.readChunkOrSimple();
                answered.add(first.cookie());
            }
            assertThat(answered).containsExactlyInAnyOrder(1L, 2L, 100L, 101L, 102L, 103L, 104L, 105L, 106L, 107L);
            assertThat(c.closedByPeer()).isTrue();
        }
        try (RawClient c = fx.open("mem")) {
            assertThat(c.read(0, 128 << 10)).isEqualTo(pattern(9, 128 << 10));
        }
    }

    @Test
    void clientThatNeverReadsItsRepliesDoesNotGrowServerMemoryOrStallOthers() throws Exception {
        ExecutorService pool = Executors.newSingleThreadExecutor();
        try (RawClient good = fx.open("mem"); RawClient hog = fx.open("mem")) {
            int window = fx.server.config().requestsInFlight();
            Future<?> flood = pool.submit(() -> {
                // A million reads of 1 MiB (28 MB of requests, far more than any socket buffers hold) is
                // a terabyte of replies; nobody reads them.
                ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE * 1024);
                for (int i = 0; i < 1024; i++) {
                    b.clear();
                    for (int k = 0; k < 1024; k++) new Request(0, Nbd.CMD_READ, i * 1024L + k, (long) (k % 64) << 20, 1 << 20).encode(b);
                    hog.write(b.flip());
                }
                return null;
            });
            // A window of the hog's 1 MiB replies, plus the good client's own small buffers.
            long bound = ((long) window << 20) + (1 << 20);
            // While the hog is stuck, the server holds at most a window of its replies, and others are served.
            for (int round = 0; round < 20; round++) {
                assertWorks(good, 100 + round);
                assertThat(fx.server.buffers().outstandingBytes()).isLessThanOrEqualTo(bound);
                Thread.sleep(25);
            }
            assertThat(flood.isDone()).as("the server stopped reading from the hog, so its writes block").isFalse();
            hog.close();
            assertThat(catchFlood(flood)).isNotNull();
            awaitNoOutstandingBuffers();
            assertWorks(good, 200);
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void clientThatNeverReadsLargeRepliesDoesNotStarveOthers() throws Exception {
        ExecutorService pool = Executors.newSingleThreadExecutor();
        try (RawClient good = fx.open("mem"); RawClient hog = fx.open("mem")) {
            // 32 MiB reads: a window of them is 2 GiB, far over the server's buffer budget.
            Future<?> flood = pool.submit(readFlood(hog, i -> (i % 16) * (64L << 20), 32 << 20));
            Thread.sleep(500); // let the hog fill whatever it can
            for (int round = 0; round < 10; round++) assertWorks(good, 300 + round);
            assertThat(fx.server.buffers().outstandingBytes()).isLessThanOrEqualTo(fx.server.buffers().budgetBytes());
            hog.close();
            catchFlood(flood);
            awaitNoOutstandingBuffers();
            assertWorks(good, 400);
        } finally {
            pool.shutdownNow();
        }
    }

    /**
     * Ten clients that never read their 32 MiB replies can together hold the whole buffer budget; the send
     * timeout drops them, and the client that does read carries on.
     */
    @Test
    void severalClientsThatNeverReadLargeRepliesDoNotStarveOthers() throws Exception {
        fx.close();
        fx = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(SIZE))),
            ServerConfig.defaults().withSendTimeout(java.time.Duration.ofSeconds(2)));
        // Enough hogs that their per-connection allowances together exceed the server's whole buffer budget.
        int hogs = 10;
        ExecutorService pool = Executors.newFixedThreadPool(hogs);
        List<RawClient> clients = new ArrayList<>();
        try (RawClient good = fx.open("mem")) {
            List<Future<?>> floods = new ArrayList<>();
            for (int h = 0; h < hogs; h++) {
                int hogId = h;
                RawClient hog = fx.open("mem");
                clients.add(hog);
                // Ranges that neither overlap nor touch, so the server cannot merge them into shared reads.
                floods.add(pool.submit(readFlood(hog, i -> ((hogId * 256L + i) % 16) * (64 << 20), 32 << 20)));
            }
            Thread.sleep(1000); // let the hogs take whatever they can
            for (int round = 0; round < 10; round++) assertWorks(good, 500 + round);
            for (RawClient hog : clients) hog.close();
            for (Future<?> f : floods) catchFlood(f);
            awaitNoOutstandingBuffers();
            assertWorks(good, 600);
        } finally {
            for (RawClient hog : clients) hog.close();
            pool.shutdownNow();
        }
    }

    /**
     * Cached reads of up to 4 MiB are read into a buffer on the connection's thread (not sent by sendfile, which
     * holds none): clients that ask for many and never read the replies hold at most what the budget lends, the
     * rest of their reads fall back to sendfile, the send timeout drops them, every buffer comes back, and a client
     * that reads carries on, on the same file.
     */
    @Test
    void clientsThatNeverReadCachedFileRepliesHoldNoMoreThanTheBudget(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir)
            throws Exception {
        fx.close();
        java.nio.file.Path file = dir.resolve("disk.img");
        byte[] head = pattern(41, 64 << 20);
        java.nio.file.Files.write(file, head); // just written: the page cache holds it
        fx = new ServerFixture(List.of(new Export("disk", "", new io.jnbd.server.backend.FileBackend(file,
                io.jnbd.server.backend.FileBackend.Mode.CACHED, false, 0))),
            ServerConfig.defaults().withSendTimeout(java.time.Duration.ofSeconds(2)));
        int hogs = 8;
        ExecutorService pool = Executors.newFixedThreadPool(hogs);
        List<RawClient> clients = new ArrayList<>();
        try (RawClient good = fx.open("disk")) {
            List<Future<?>> floods = new ArrayList<>();
            for (int h = 0; h < hogs; h++) {
                RawClient hog = fx.open("disk");
                clients.add(hog);
                floods.add(pool.submit(readFlood(hog, i -> (i % 15) * (4L << 20), 4 << 20)));
            }
            Thread.sleep(1000); // let the hogs take whatever they can
            assertThat(fx.server.buffers().outstandingBytes()).as("the hogs' unsent replies hold buffers")
                .isPositive().isLessThanOrEqualTo(fx.server.buffers().budgetBytes());
            for (int round = 0; round < 10; round++) {
                long at = (round * 3L + 1) << 20;
                assertThat(good.read(at, 1 << 20)).isEqualTo(java.util.Arrays.copyOfRange(head, (int) at, (int) at + (1 << 20)));
                assertWorks(good, 800 + round);
            }
            for (RawClient hog : clients) hog.close();
            for (Future<?> f : floods) catchFlood(f);
            awaitNoOutstandingBuffers();
            assertWorks(good, 900);
        } finally {
            for (RawClient hog : clients) hog.close();
            pool.shutdownNow();
        }
    }

    @Test
    void oneClientThatNeverReadsDoesNotStarveOthersUnderASmallBufferBudget() throws Exception {
        // The smallest budget the server allows: no larger than one connection's own allowance.
        try (ServerFixture small = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(SIZE))),
                ServerConfig.defaults().withBufferBudget(64L << 20))) {
            ExecutorService pool = Executors.newSingleThreadExecutor();
            try (RawClient good = small.open("mem"); RawClient hog = small.open("mem")) {
                Future<?> flood = pool.submit(readFlood(hog, i -> (i % 16) * (64L << 20), 32 << 20));
                Thread.sleep(500);
                for (int round = 0; round < 5; round++) assertWorks(good, 700 + round);
                hog.close();
                catchFlood(flood);
            } finally {
                pool.shutdownNow();
            }
        }
    }

    @Test
    void connectionsDroppedDuringSplitReadsReturnEveryBuffer(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
        try (ServerFixture split = new ServerFixture(List.of(ExportSpec.parse("d",
                "file:" + dir.resolve("split.img") + ",size=64M,mode=direct,split=1M,chunk=256K,streams=4").openExport()))) {
            for (int i = 0; i < 8; i++) {
                RawClient c = split.open("d", true, false);
                for (int k = 0; k < 8; k++) c.send(new Request(0, Nbd.CMD_READ, k, (long) k << 23, 8 << 20));
                if (i % 2 == 0) c.readChunk(); // take a little of the reply first
                c.channel.socket().setSoLinger(true, 0);
                c.close();
            }
            assertDrained(split);
            try (RawClient c = split.open("d", true, false)) {
                assertThat(c.read(0, 8 << 20)).hasSize(8 << 20);
            }
        }
    }

    @Test
    void connectionsDroppedDuringSplitWritesReturnEveryBuffer(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
        try (ServerFixture split = new ServerFixture(List.of(ExportSpec.parse("d",
                "file:" + dir.resolve("split.img") + ",size=64M,mode=direct,split=1M,chunk=256K").openExport()))) {
            for (int i = 0; i < 8; i++) {
                RawClient c = split.open("d", true, false);
                // A 4 MiB write of which only part of the payload ever comes: its first chunks are on the disk
                // (or on their way) when the connection drops.
                c.write(encoded(new Request(0, Nbd.CMD_WRITE, i, (long) i << 22, 4 << 20)));
                c.write(new byte[(1 << 20) + i * 100_000]);
                Thread.sleep(20);
                c.channel.socket().setSoLinger(true, 0);
                c.close();
            }
            assertDrained(split);
            try (RawClient c = split.open("d", true, false)) {
                byte[] data = new byte[4 << 20];
                java.util.Arrays.fill(data, (byte) 7);
                assertThat(c.write(0, data, 0)).isZero();
                assertThat(c.read(0, 4 << 20)).isEqualTo(data);
            }
        }
    }

    /** Waits until the server holds no connection and no buffer, then asserts that it got there. */
    private static void assertDrained(ServerFixture fx) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while ((fx.server.buffers().outstandingBytes() != 0 || fx.server.connectionCount() != 0)
                && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertThat(fx.server.buffers().outstandingBytes()).isZero();
        assertThat(fx.server.connectionCount()).isZero();
    }

    private static java.nio.ByteBuffer encoded(Request r) {
        java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(Nbd.REQUEST_SIZE);
        r.encode(b);
        return b.flip();
    }

    /** 256 reads of {@code length} bytes at {@code offset(i)}, cookie i, sent and never read back. */
    private static java.util.concurrent.Callable<Void> readFlood(RawClient hog, java.util.function.IntToLongFunction offset,
                                                                 int length) {
        return () -> {
            ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE);
            for (int i = 0; i < 256; i++) {
                b.clear();
                new Request(0, Nbd.CMD_READ, i, offset.applyAsLong(i), length).encode(b);
                hog.write(b.flip());
            }
            return null;
        };
    }

    private static Throwable catchFlood(Future<?> flood) throws InterruptedException {
        try {
            flood.get(30, TimeUnit.SECONDS);
            return null;
        } catch (java.util.concurrent.ExecutionException e) {
            return e.getCause(); // the socket was closed under the writer
        } catch (java.util.concurrent.TimeoutException e) {
            throw new AssertionError("the flooding writer did not end after its socket was closed");
        }
    }

    private void awaitNoOutstandingBuffers() throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (fx.server.buffers().outstandingBytes() != 0) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("buffers still on loan: " + fx.server.buffers().outstandingBytes());
            }
            Thread.sleep(10);
        }
    }

    @Test
    void sixtyFourConnectionsAtOnceEachWriteAndReadBack() throws Exception {
        int n = 64;
        ExecutorService pool = Executors.newFixedThreadPool(n);
        try {
            java.util.concurrent.CyclicBarrier barrier = new java.util.concurrent.CyclicBarrier(n);
            List<Future<?>> results = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                int id = i;
                results.add(pool.submit(() -> {
                    try (RawClient c = fx.open("mem", id % 2 == 0, false)) {
                        barrier.await(30, TimeUnit.SECONDS); // all connected before anyone writes
                        long base = (long) id << 20;
                        for (int k = 0; k < 8; k++) {
                            byte[] d = pattern(id * 100L + k, 128 << 10);
                            assertThat(c.write(base + k * (128L << 10), d, k == 7 ? Nbd.CMD_FLAG_FUA : 0)).isZero();
                        }
                        for (int k = 0; k < 8; k++) {
                            assertThat(c.read(base + k * (128L << 10), 128 << 10)).isEqualTo(pattern(id * 100L + k, 128 << 10));
                        }
                        c.disconnect();
                    }
                    return null;
                }));
            }
            for (Future<?> f : results) f.get(90, TimeUnit.SECONDS);
        } finally {
            pool.shutdownNow();
        }
        // Nobody wrote over anybody else.
        try (RawClient c = fx.open("mem")) {
            for (int id = 0; id < n; id++) {
                assertThat(c.read(((long) id << 20) + 3 * (128L << 10), 128 << 10)).isEqualTo(pattern(id * 100L + 3, 128 << 10));
            }
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (fx.server.connectionCount() > 0 && System.nanoTime() < deadline) Thread.sleep(10);
        assertThat(fx.server.connectionCount()).isZero();
    }

    @Test
    void connectionThatDiesMidStreamDoesNotLeakBuffersOrConnections() throws Exception {
        for (int i = 0; i < 10; i++) {
            RawClient c = fx.open("mem");
            for (int k = 0; k < 16; k++) c.send(new Request(0, Nbd.CMD_READ, k, 0, 1 << 20));
            c.channel.socket().setSoLinger(true, 0); // reset, not FIN
            c.close();
        }
        awaitNoOutstandingBuffers();
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (fx.server.connectionCount() > 0 && System.nanoTime() < deadline) Thread.sleep(10);
        assertThat(fx.server.connectionCount()).isZero();
        try (RawClient c = fx.open("mem")) {
            assertWorks(c, 10);
        }
    }
}
