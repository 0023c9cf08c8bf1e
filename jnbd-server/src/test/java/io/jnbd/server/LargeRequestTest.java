package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.protocol.StructuredReplyHeader;
import io.jnbd.server.backend.FilterForTests;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.tls.TestPki;
import io.jnbd.tls.TlsServer;
import io.jnbd.tls.TlsServerSettings;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Requests longer than the export's maximum payload (32 MiB) from clients that did not agree block sizes: the spec
 * asks a server for an effectively unlimited maximum there, so they are served, streamed in pieces, on every kind of
 * export, plain and over TLS, while clients that agreed keep getting EOVERFLOW. Whatever the length, a request
 * holds a bounded share of the buffer budget.
 */
@Timeout(600)
class LargeRequestTest {
    private static final int FIFTY_MILLION = 50_000_000;
    private static final int SIXTY_FOUR_MIB = 64 << 20;
    private static final long EXPORT_SIZE = 160L << 20;

    @TempDir
    Path dir;

    enum Kind { CACHED, DIRECT, MEMORY, ASYNC }

    /** Memory behind the asynchronous calls a network backend (the pool) makes: completed on other threads. */
    static final class AsyncMemory extends FilterForTests {
        AsyncMemory(long size) {
            super(new MemoryBackend(size));
        }

        @Override public Set<Trait> traits() { return Set.of(Trait.ASYNC, Trait.REMOTE); }

        @Override
        public CompletableFuture<Void> readAsync(long offset, ByteBuffer dst) {
            return CompletableFuture.runAsync(() -> call(() -> inner.read(offset, dst)), Thread::startVirtualThread);
        }

        @Override
        public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
            return CompletableFuture.runAsync(() -> call(() -> inner.write(offset, srcs, fua)), Thread::startVirtualThread);
        }

        private interface Io { void run() throws IOException; }

        private static void call(Io io) {
            try {
                io.run();
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
    }

    private Export export(Kind kind, long size) throws IOException {
        Path file = dir.resolve("disk.img");
        return switch (kind) {
            case CACHED -> ExportSpec.parse("d", "file:" + file + ",size=" + size).openExport();
            case DIRECT -> ExportSpec.parse("d", "file:" + file + ",size=" + size + ",mode=direct").openExport();
            case MEMORY -> new Export("d", "", new MemoryBackend(size));
            case ASYNC -> new Export("d", "", new AsyncMemory(size));
        };
    }

    private record Served(NbdServer server, java.net.SocketAddress address, Path psk) implements AutoCloseable {
        @Override
        public void close() {
            server.stop(Duration.ofSeconds(10));
        }
    }

    private Served serve(Export export, boolean tls, ServerConfig config) throws Exception {
        NbdServer server;
        Path psk = null;
        if (tls) {
            psk = dir.resolve("keys.psk");
            TestPki.writePsk(psk, "alice");
            server = new NbdServer(new Exports(List.of(export), null), config,
                new ServerTls(ServerTls.Mode.REQUIRE, TlsServer.load(new TlsServerSettings(null, psk, false))));
        } else {
            server = new NbdServer(new Exports(List.of(export), null), config);
        }
        return new Served(server, server.listen(new InetSocketAddress("127.0.0.1", 0)), psk);
    }

    /** Through GO without asking for NBD_INFO_BLOCK_SIZE: the client has agreed to no maximum. */
    private static RawClient unagreed(Served s, boolean structured) throws IOException {
        RawClient c = RawClient.connect(s.address());
        c.greeting();
        c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        if (s.psk() != null) RealTls.startTls(c, RealTls.psk(s.psk(), "alice"));
        c.negotiateAfterGreeting("d", structured, false, List.of());
        return c;
    }

    static Stream<Arguments> everyExportPlainAndTls() {
        List<Arguments> out = new ArrayList<>();
        for (Kind k : Kind.values()) {
            out.add(Arguments.of(k, false));
            out.add(Arguments.of(k, true));
        }
        return out.stream();
    }

    @ParameterizedTest(name = "{0}, tls={1}")
    @MethodSource("everyExportPlainAndTls")
    void clientsThatAgreedNoBlockSizesWriteAndReadPast32MiB(Kind kind, boolean tls) throws Exception {
        try (Served s = serve(export(kind, EXPORT_SIZE), tls, ServerConfig.defaults())) {
            try (RawClient c = unagreed(s, false)) {
                writeStreamed(c, 1024, FIFTY_MILLION, 1);
                readSimpleAndCheck(c, 1024, FIFTY_MILLION, 1);
                c.disconnect();
            }
            try (RawClient c = unagreed(s, true)) {
                writeStreamed(c, 4097, SIXTY_FOUR_MIB, 2);
                readChunkedAndCheck(c, 4097, SIXTY_FOUR_MIB, 2);
                // Asked not to fragment: one OFFSET_DATA chunk of the whole length.
                readUnfragmentedAndCheck(c, 4097, FIFTY_MILLION, 2);
                c.disconnect();
            }
            awaitBuffersReturned(s.server());
        }
    }

    /**
     * A streamed read sent as one simple reply leaves in pieces as they are read, on other threads; replies to the
     * small reads sent behind it, made on the connection's reader meanwhile, must not land between its pieces.
     */
    @ParameterizedTest(name = "{0}, tls={1}")
    @MethodSource("everyExportPlainAndTls")
    void smallReadsBehindAStreamedSimpleReplyNeverLandInsideIt(Kind kind, boolean tls) throws Exception {
        try (Served s = serve(export(kind, EXPORT_SIZE), tls, ServerConfig.defaults());
             RawClient c = unagreed(s, false)) {
            writeStreamed(c, 0, SIXTY_FOUR_MIB, 3);
            long big = c.cookie();
            c.send(new Request(0, Nbd.CMD_READ, big, 0, SIXTY_FOUR_MIB));
            java.util.Map<Long, Long> small = new java.util.HashMap<>();
            for (int i = 0; i < 64; i++) {
                long cookie = c.cookie();
                long at = (long) i * 1_000_003 % (SIXTY_FOUR_MIB - 4096);
                small.put(cookie, at);
                c.send(new Request(0, Nbd.CMD_READ, cookie, at, 4096));
            }
            for (int replies = 0; replies < 65; replies++) {
                ByteBuffer h = c.readBytes(Nbd.SIMPLE_REPLY_SIZE);
                assertThat(h.getInt()).as("reply %d starts with a simple reply's magic", replies).isEqualTo(Nbd.SIMPLE_REPLY_MAGIC);
                assertThat(h.getInt()).as("error").isZero();
                long cookie = h.getLong();
                if (cookie == big) {
                    readAndCheck(c, 0, SIXTY_FOUR_MIB, 3);
                } else {
                    Long at = small.remove(cookie);
                    assertThat(at).as("a cookie that was sent once").isNotNull();
                    readAndCheck(c, at, 4096, 3);
                }
            }
            assertThat(small).isEmpty();
            c.disconnect();
            awaitBuffersReturned(s.server());
        }
    }

    /**
     * A client that goes away in the middle of such a read, with requests behind it: the connection ends and gives
     * its buffers back; the reader, waiting for the read to be on the wire, is not left waiting.
     */
    @ParameterizedTest(name = "{0}, tls={1}")
    @MethodSource("everyExportPlainAndTls")
    void aClientGoneInsideAStreamedSimpleReplyEndsItsConnection(Kind kind, boolean tls) throws Exception {
        try (Served s = serve(export(kind, EXPORT_SIZE), tls, ServerConfig.defaults())) {
            try (RawClient c = unagreed(s, false)) {
                c.send(new Request(0, Nbd.CMD_READ, c.cookie(), 0, SIXTY_FOUR_MIB));
                for (int i = 0; i < 8; i++) c.send(new Request(0, Nbd.CMD_READ, c.cookie(), (long) i << 20, 4096));
                c.readBytes(Nbd.SIMPLE_REPLY_SIZE + (1 << 20)); // some of it, then gone
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (s.server().connectionCount() != 0 && System.nanoTime() < deadline) Thread.sleep(20);
            assertThat(s.server().connectionCount()).as("connections left").isZero();
            awaitBuffersReturned(s.server());
        }
    }

    @Test
    void nbdOptExportNameClientsHaveNoMaximumEither() throws Exception {
        try (Served s = serve(export(Kind.DIRECT, EXPORT_SIZE), false, ServerConfig.defaults());
             RawClient c = RawClient.connect(s.address())) {
            c.greeting();
            c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
            c.sendOption(Nbd.OPT_EXPORT_NAME, "d".getBytes(StandardCharsets.UTF_8));
            ByteBuffer info = c.readBytes(10);
            assertThat(info.getLong()).isEqualTo(EXPORT_SIZE);
            writeStreamed(c, 1024, FIFTY_MILLION, 3);
            readSimpleAndCheck(c, 1024, FIFTY_MILLION, 3);
            c.disconnect();
        }
    }

    /**
     * Writes taken in pieces whose first piece is short, because the offset is not on a piece boundary: a direct
     * write split as it arrives (512 KiB pieces, here a first one of 64 KiB) and a streamed one (4 MiB pieces, a
     * first one of 4 KiB). A short first piece once waited forever for the input buffer, which takes only headers
     * after a large write's header, spinning the connection's thread.
     */
    @Test
    void writesWhoseFirstPieceIsShortArriveWhole() throws Exception {
        try (Served s = serve(export(Kind.DIRECT, EXPORT_SIZE), false, ServerConfig.defaults())) {
            try (RawClient agreed = RawClient.open(s.address(), "d", false, false)) {
                writeStreamed(agreed, 448 << 10, 2 << 20, 7);
                readSimpleAndCheck(agreed, 448 << 10, 2 << 20, 7);
                agreed.disconnect();
            }
            try (RawClient c = unagreed(s, false)) {
                writeStreamed(c, (4 << 20) - 4096, 40_000_000, 8);
                readSimpleAndCheck(c, (4 << 20) - 4096, 40_000_000, 8);
                c.disconnect();
            }
            awaitBuffersReturned(s.server());
        }
    }

    @Test
    void clientsThatAgreedBlockSizesStillGetEoverflowAboveTheMaximum() throws Exception {
        try (Served s = serve(export(Kind.MEMORY, EXPORT_SIZE), false, ServerConfig.defaults());
             RawClient c = RawClient.open(s.address(), "d", true, false)) {
            int over = (32 << 20) + 4096;
            assertThat(c.readError(0, 0, over)).isEqualTo(Nbd.EOVERFLOW);
            assertThat(c.write(0, new byte[over], 0)).isEqualTo(Nbd.EOVERFLOW);
            assertThat(c.read(0, 4096)).hasSize(4096); // the refused payload was drained, the stream is in step
            c.disconnect();
        }
    }

    @Test
    void eightOneGibWritesAtOnceHoldOnlyTheirPiecesOfTheBudget() throws Exception {
        long gib = 1L << 30;
        // A file, not memory: the test JVM's direct memory would not hold a 1 GiB memory export beside the buffers.
        try (Served s = serve(export(Kind.CACHED, gib), false, ServerConfig.defaults())) {
            ExecutorService pool = Executors.newFixedThreadPool(8);
            try {
                List<Future<?>> writers = new ArrayList<>();
                for (int i = 0; i < 8; i++) {
                    int seed = 10 + i;
                    writers.add(pool.submit(() -> {
                        try (RawClient c = unagreed(s, false)) {
                            writeStreamed(c, 0, gib, seed);
                            c.disconnect();
                        }
                        return null;
                    }));
                }
                for (Future<?> w : writers) w.get(300, TimeUnit.SECONDS);
            } finally {
                pool.shutdownNow();
            }
            long peak = s.server().bufferPeakBytes();
            System.out.printf("8 x 1 GiB writes: buffer peak %d MiB of a %d MiB budget%n", peak >> 20,
                s.server().bufferBudgetBytes() >> 20);
            assertThat(peak).as("buffer peak").isLessThanOrEqualTo(8 * Export.STREAM_BYTES + (8L << 20));
            assertThat(peak).isLessThanOrEqualTo(s.server().bufferBudgetBytes());
            awaitBuffersReturned(s.server());
        }
    }

    @Test
    void aOneGibWriteHalfSentLeavesOtherClientsServedAndThenLands() throws Exception {
        long gib = 1L << 30;
        try (Served s = serve(export(Kind.CACHED, gib + (1 << 20)), false, ServerConfig.defaults());
             RawClient big = unagreed(s, false); RawClient other = unagreed(s, true)) {
            long cookie = big.cookie();
            big.send(new Request(0, Nbd.CMD_WRITE, cookie, 512, gib));
            sendPattern(big, 512, gib / 2, 5);
            // The big write is in the middle of its payload: the other client's requests are served meanwhile.
            byte[] data = ServerFixture.pattern(9, 4096);
            for (int i = 0; i < 100; i++) {
                assertThat(other.write(gib + 4096L * (i % 64), data, 0)).isZero();
                assertThat(other.read(gib + 4096L * (i % 64), 4096)).isEqualTo(data);
            }
            sendPattern(big, 512 + gib / 2, gib - gib / 2, 5);
            RawClient.Reply reply = big.readReply();
            assertThat(reply.cookie()).isEqualTo(cookie);
            assertThat(reply.error()).isZero();
            readSimpleAndCheck(big, 512, gib, 5);
            big.disconnect();
            other.disconnect();
            awaitBuffersReturned(s.server());
        }
    }

    @Test
    void aClaimedFourGibWriteThatStopsAfterOneKibIsDroppedAndGivesItsBuffersBack() throws Exception {
        long length = 0xFFFF_FFFFL;
        ServerConfig config = ServerConfig.defaults().withReceiveTimeout(Duration.ofSeconds(1));
        try (Served s = serve(export(Kind.CACHED, length + 4096), false, config);
             RawClient c = unagreed(s, false); RawClient other = unagreed(s, false)) {
            c.send(new Request(0, Nbd.CMD_WRITE, c.cookie(), 0, length));
            c.write(ByteBuffer.wrap(new byte[1024]));
            assertThat(c.closedByPeer()).as("dropped at the receive timeout").isTrue();
            assertThat(other.read(0, 4096)).hasSize(4096);
            other.disconnect();
            awaitBuffersReturned(s.server());
        }
    }

    // ------------------------------------------------------------------ the data and its checks

    /** The byte at export offset {@code at} of pattern {@code seed}: any range can be made and checked alone. */
    private static byte patternByte(long at, int seed) {
        long x = at * 0x9E3779B97F4A7C15L + seed * 0xBF58476D1CE4E5B9L;
        x ^= x >>> 31;
        return (byte) (x ^ (x >>> 17));
    }

    private static void fill(byte[] b, long at, int seed) {
        for (int i = 0; i < b.length; i++) b[i] = patternByte(at + i, seed);
    }

    private static void writeStreamed(RawClient c, long offset, long length, int seed) throws IOException {
        long cookie = c.cookie();
        c.send(new Request(0, Nbd.CMD_WRITE, cookie, offset, length));
        sendPattern(c, offset, length, seed);
        RawClient.Reply reply = c.readReply();
        assertThat(reply.cookie()).isEqualTo(cookie);
        assertThat(reply.error()).as("write of %d bytes at %d", length, offset).isZero();
    }

    private static void sendPattern(RawClient c, long offset, long length, int seed) throws IOException {
        byte[] piece = new byte[1 << 20];
        for (long done = 0; done < length; ) {
            int n = (int) Math.min(piece.length, length - done);
            byte[] b = n == piece.length ? piece : new byte[n];
            fill(b, offset + done, seed);
            c.write(ByteBuffer.wrap(b));
            done += n;
        }
    }

    private static void check(byte[] got, long at, int seed) {
        for (int i = 0; i < got.length; i++) {
            if (got[i] != patternByte(at + i, seed)) {
                throw new AssertionError("byte at offset " + (at + i) + " differs");
            }
        }
    }

    private static void readSimpleAndCheck(RawClient c, long offset, long length, int seed) throws IOException {
        long cookie = c.cookie();
        c.send(new Request(0, Nbd.CMD_READ, cookie, offset, length));
        ByteBuffer h = c.readBytes(Nbd.SIMPLE_REPLY_SIZE);
        assertThat(h.getInt()).isEqualTo(Nbd.SIMPLE_REPLY_MAGIC);
        assertThat(h.getInt()).as("error").isZero();
        assertThat(h.getLong()).isEqualTo(cookie);
        readAndCheck(c, offset, length, seed);
    }

    private static void readAndCheck(RawClient c, long offset, long length, int seed) throws IOException {
        byte[] piece = new byte[1 << 20];
        for (long done = 0; done < length; ) {
            int n = (int) Math.min(piece.length, length - done);
            byte[] b = n == piece.length ? piece : new byte[n];
            c.readBytes(b);
            check(b, offset + done, seed);
            done += n;
        }
    }

    /** A structured read: OFFSET_DATA chunks in any order, which must cover the range exactly once. */
    private static void readChunkedAndCheck(RawClient c, long offset, int length, int seed) throws IOException {
        long cookie = c.cookie();
        c.send(new Request(0, Nbd.CMD_READ, cookie, offset, length));
        List<long[]> covered = new ArrayList<>();
        while (true) {
            // Read here rather than with RawClient.readChunk: a sendfile reply is one chunk of any length.
            ByteBuffer h = c.readBytes(Nbd.STRUCTURED_REPLY_SIZE);
            assertThat(h.getInt()).isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
            StructuredReplyHeader header = StructuredReplyHeader.decodeAfterMagic(h);
            assertThat(header.cookie()).isEqualTo(cookie);
            assertThat(header.type()).as("chunk type").isEqualTo(Nbd.REPLY_TYPE_OFFSET_DATA);
            long at = c.readBytes(8).getLong();
            long n = header.length() - 8;
            readAndCheck(c, at, n, seed);
            covered.add(new long[] {at, at + n});
            if ((header.flags() & Nbd.REPLY_FLAG_DONE) != 0) break;
        }
        covered.sort((a, b) -> Long.compare(a[0], b[0]));
        long at = offset;
        for (long[] range : covered) {
            assertThat(range[0]).as("chunks cover the read once, in order of offset").isEqualTo(at);
            at = range[1];
        }
        assertThat(at).isEqualTo(offset + length);
    }

    private static void readUnfragmentedAndCheck(RawClient c, long offset, int length, int seed) throws IOException {
        long cookie = c.cookie();
        c.send(new Request(Nbd.CMD_FLAG_DF, Nbd.CMD_READ, cookie, offset, length));
        ByteBuffer h = c.readBytes(Nbd.STRUCTURED_REPLY_SIZE);
        assertThat(h.getInt()).isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        StructuredReplyHeader header = StructuredReplyHeader.decodeAfterMagic(h);
        assertThat(header.type()).isEqualTo(Nbd.REPLY_TYPE_OFFSET_DATA);
        assertThat(header.flags() & Nbd.REPLY_FLAG_DONE).as("one chunk, flagged DONE").isNotZero();
        assertThat(header.cookie()).isEqualTo(cookie);
        assertThat(header.length()).isEqualTo(8L + length);
        assertThat(c.readBytes(8).getLong()).isEqualTo(offset);
        readAndCheck(c, offset, length, seed);
    }

    /** Buffers of the last replies are released just after they leave: wait a moment for them. */
    static void awaitBuffersReturned(NbdServer server) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (server.bufferBytesInUse() != 0 && System.nanoTime() < deadline) Thread.sleep(20);
        assertThat(server.bufferBytesInUse()).as("buffer bytes still on loan").isZero();
    }
}
