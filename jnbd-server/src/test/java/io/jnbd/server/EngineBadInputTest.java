package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.protocol.StructuredReplyHeader;
import io.jnbd.server.backend.MemoryBackend;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Hostile or odd clients at the socket level: one that reads its replies a byte at a time, ones that hang up
 * in the middle of a large reply, ten thousand that connect and go away at every stage, hundreds that connect
 * and then stop. Only what a client can see is asserted (bytes on the wire, the server's public counts, the
 * process's open descriptors), so that the tests hold for any connection engine behind {@link NbdServer}.
 */
@Timeout(180)
class EngineBadInputTest {
    static final int KIB = 1 << 10, MIB = 1 << 20;

    @TempDir
    Path dir;

    // ------------------------------------------------------------------ 1. a client that reads a byte at a time

    /**
     * A client with four reads in flight (4 KiB, 256 KiB, 2 MiB, 4 KiB) takes their replies one byte per read()
     * call. Every reply arrives whole and right; and every 256 KiB of its crawl, with its replies stuck in the
     * server's socket, a second client writes and reads back and is served.
     */
    @Test
    void aClientReadingOneByteAtATimeGetsEveryReplyWhileAnotherIsServed() throws Exception {
        byte[] image = pattern(11, 4 * MIB);
        try (ServerFixture fx = ServerFixture.memory(64L * MIB);
             RawClient slow = fx.open("mem", true, false);
             RawClient other = fx.open("mem", true, false)) {
            assertThat(other.write(0, image, 0)).isZero();

            long[][] reads = { // cookie, offset, length
                {1, 12 * KIB, 4 * KIB}, {2, 64 * KIB, 256 * KIB}, {3, MIB + 4 * KIB, 2 * MIB}, {4, 3 * MIB + 4 * KIB, 4 * KIB}};
            ByteBuffer requests = ByteBuffer.allocate(reads.length * Nbd.REQUEST_SIZE);
            for (long[] r : reads) new Request(0, Nbd.CMD_READ, r[0], r[1], r[2]).encode(requests);
            slow.write(requests.flip());

            AtomicInteger otherRounds = new AtomicInteger();
            ByteAtATime crawl = new ByteAtATime(slow.channel.socket().getInputStream(), 256 * KIB, () -> {
                // The slow client is in the middle of its replies: the server holds the rest of them for it.
                int round = otherRounds.getAndIncrement();
                byte[] d = pattern(100 + round, 8 * KIB);
                long at = 32L * MIB + round * 8L * KIB;
                assertThat(other.write(at, d, 0)).isZero();
                assertThat(other.read(at, d.length)).isEqualTo(d);
                assertThat(other.read(round * 64L * KIB, 64 * KIB))
                    .isEqualTo(Arrays.copyOfRange(image, round * 64 * KIB, (round + 1) * 64 * KIB));
            });
            Map<Long, List<RawClient.Chunk>> replies = crawl.readStructuredReplies(reads.length);

            assertThat(replies.keySet()).containsExactlyInAnyOrder(1L, 2L, 3L, 4L);
            for (long[] r : reads) {
                byte[] got = RawClient.assemble(replies.get(r[0]), r[0], r[1], (int) r[2]);
                assertThat(got).as("read %d", r[0]).isEqualTo(Arrays.copyOfRange(image, (int) r[1], (int) (r[1] + r[2])));
            }
            assertThat(otherRounds.get()).as("rounds of the other client during the crawl").isGreaterThanOrEqualTo(8);
            // Still in step after the crawl.
            assertThat(slow.read(8 * KIB, 4 * KIB)).isEqualTo(Arrays.copyOfRange(image, 8 * KIB, 12 * KIB));
            slow.disconnect();
            awaitDrained(fx, 1);
        }
    }

    /**
     * The send timeout is for clients whose replies have stopped moving: a client that reads slowly but never
     * stops (4 KiB every 10 ms, some 400 KiB/s) is not dropped, even when one reply (2 MiB) takes it longer than
     * the timeout (here 2 s) to read.
     */
    @Test
    void aSlowButSteadyReaderIsNotDroppedByTheSendTimeout() throws Exception {
        byte[] image = pattern(12, 4 * MIB);
        ServerConfig config = ServerConfig.defaults().withSendTimeout(Duration.ofSeconds(2));
        try (ServerFixture fx = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(64L * MIB))), config);
             RawClient slow = fx.open("mem", true, false)) {
            assertThat(slow.write(0, image, 0)).isZero();
            long[][] reads = {{1, 0, 2 * MIB}, {2, 2 * MIB, 2 * MIB}};
            ByteBuffer requests = ByteBuffer.allocate(reads.length * Nbd.REQUEST_SIZE);
            for (long[] r : reads) new Request(0, Nbd.CMD_READ, r[0], r[1], r[2]).encode(requests);
            slow.write(requests.flip());

            InputStream in = slow.channel.socket().getInputStream();
            java.io.ByteArrayOutputStream all = new java.io.ByteArrayOutputStream();
            byte[] piece = new byte[4 * KIB];
            int expected = 2 * (2 * MIB) + 64 * KIB; // the data, and room for any number of chunk headers
            try {
                while (all.size() < expected) {
                    int n = in.read(piece);
                    if (n < 0) break;
                    all.write(piece, 0, n);
                    Thread.sleep(10);
                    if (all.size() >= 4 * MIB && repliesComplete(all.toByteArray(), reads.length)) break;
                }
            } catch (SocketException e) {
                // a reset: the check below says how far the client got
            }
            assertThat(repliesComplete(all.toByteArray(), reads.length))
                .as("both replies arrived (the server hung up after %d bytes)", all.size()).isTrue();
            ByteAtATime parse = new ByteAtATime(new java.io.ByteArrayInputStream(all.toByteArray()), Integer.MAX_VALUE, () -> {});
            Map<Long, List<RawClient.Chunk>> replies = parse.readStructuredReplies(reads.length);
            for (long[] r : reads) {
                assertThat(RawClient.assemble(replies.get(r[0]), r[0], r[1], (int) r[2]))
                    .isEqualTo(Arrays.copyOfRange(image, (int) r[1], (int) (r[1] + r[2])));
            }
            assertThat(slow.read(4096, 4096)).isEqualTo(Arrays.copyOfRange(image, 4096, 8192));
        }
    }

    /** Whether {@code bytes} holds {@code replies} whole structured replies (each ended by a DONE chunk). */
    private static boolean repliesComplete(byte[] bytes, int replies) {
        ByteBuffer b = ByteBuffer.wrap(bytes);
        int done = 0;
        while (b.remaining() >= Nbd.STRUCTURED_REPLY_SIZE) {
            int start = b.position();
            int flags = Short.toUnsignedInt(b.getShort(start + 4));
            long length = Integer.toUnsignedLong(b.getInt(start + 16));
            if (b.remaining() < Nbd.STRUCTURED_REPLY_SIZE + length) return false;
            b.position((int) (start + Nbd.STRUCTURED_REPLY_SIZE + length));
            if ((flags & Nbd.REPLY_FLAG_DONE) != 0) done++;
        }
        return done >= replies && !b.hasRemaining();
    }

    /**
     * Reads a connection's bytes one per {@link InputStream#read()} call, napping for a millisecond every 32 KiB
     * and running {@code between} every {@code every} bytes.
     */
    private static final class ByteAtATime {
        private final InputStream in;
        private final int every;
        private final ThrowingRunnable between;
        private long count;

        ByteAtATime(InputStream in, int every, ThrowingRunnable between) {
            this.in = in;
            this.every = every;
            this.between = between;
        }

        byte[] read(int n) throws Exception {
            byte[] b = new byte[n];
            for (int i = 0; i < n; i++) {
                int v = in.read();
                if (v < 0) throw new EOFException("server closed the connection after " + count + " bytes");
                b[i] = (byte) v;
                count++;
                if (count % (32 * KIB) == 0) Thread.sleep(1);
                if (count % every == 0) between.run();
            }
            return b;
        }

        /** Reads structured chunks until {@code replies} replies have had their DONE chunk; chunks by cookie. */
        Map<Long, List<RawClient.Chunk>> readStructuredReplies(int replies) throws Exception {
            Map<Long, List<RawClient.Chunk>> out = new LinkedHashMap<>();
            int done = 0;
            while (done < replies) {
                ByteBuffer h = ByteBuffer.wrap(read(Nbd.STRUCTURED_REPLY_SIZE));
                assertThat(h.getInt()).as("structured reply magic").isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
                StructuredReplyHeader header = StructuredReplyHeader.decodeAfterMagic(h);
                assertThat(header.length()).as("chunk length").isLessThanOrEqualTo(32L * MIB + 8);
                RawClient.Chunk c = new RawClient.Chunk(header.flags(), header.type(), header.cookie(),
                    ByteBuffer.wrap(read((int) header.length())));
                List<RawClient.Chunk> chunks = out.computeIfAbsent(c.cookie(), k -> new ArrayList<>());
                assertThat(chunks).as("a chunk after DONE for cookie %d", c.cookie()).noneMatch(RawClient.Chunk::done);
                chunks.add(c);
                if (c.done()) done++;
            }
            return out;
        }
    }

    @FunctionalInterface
    private interface ThrowingRunnable {
        void run() throws Exception;
    }

    // ------------------------------------------------------------------ 2. a client that hangs up mid-reply

    /**
     * A client asks for 32 MiB in eight 4 MiB structured reads, far more than the socket buffers hold, takes a
     * few KiB of the first reply and hangs up (with a FIN, or with SO_LINGER 0 a reset). The server lets go of
     * the connection and of every buffer, and serves the next client. The file export is in cached mode, whose
     * reads leave by sendfile.
     */
    @ParameterizedTest(name = "{0} export, reset={1}")
    @CsvSource({"mem, false", "mem, true", "file, false", "file, true"})
    void aClientThatHangsUpInTheMiddleOfALargeReplyLeavesNothingBehind(String export, boolean reset) throws Exception {
        byte[] image = pattern(21, 32 * MIB);
        try (ServerFixture fx = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(64L * MIB)),
                ExportSpec.parse("file", "file:" + dir.resolve("cached.img") + ",size=64M").openExport()))) {
            try (RawClient c = fx.open(export)) {
                for (int k = 0; k < 8; k++) {
                    assertThat(c.write((long) k * 4 * MIB, Arrays.copyOfRange(image, k * 4 * MIB, (k + 1) * 4 * MIB), 0)).isZero();
                }
            }
            int[] taken = {2 * KIB, 5 * KIB + 3, 13 * KIB};
            for (int round = 0; round < taken.length; round++) {
                RawClient c = fx.open(export, true, false);
                try {
                    ByteBuffer requests = ByteBuffer.allocate(8 * Nbd.REQUEST_SIZE);
                    for (int k = 0; k < 8; k++) new Request(0, Nbd.CMD_READ, 100 + k, (long) k * 4 * MIB, 4 * MIB).encode(requests);
                    c.write(requests.flip());
                    ByteBuffer first = c.readBytes(taken[round]);
                    assertThat(first.getInt()).as("structured reply magic").isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
                    if (reset) c.channel.socket().setSoLinger(true, 0);
                } finally {
                    c.close();
                }
                awaitDrained(fx, 0);
                try (RawClient next = fx.open(export, round % 2 == 0, false)) {
                    int k = (round * 3 + 1) % 8;
                    assertThat(next.read((long) k * 4 * MIB, 4 * MIB))
                        .isEqualTo(Arrays.copyOfRange(image, k * 4 * MIB, (k + 1) * 4 * MIB));
                    next.disconnect();
                }
            }
            awaitDrained(fx, 0);
        }
    }

    // ------------------------------------------------------------------ 3. ten thousand connect/close cycles

    /**
     * Ten thousand connections from eight threads, each ended at a different stage: at once, after the greeting,
     * after the handshake, or after a READ whose reply is never read; each with a FIN or a reset. Afterwards the
     * server holds no connection, no buffer and no more descriptors than before, and serves the next client.
     */
    @Test
    void tenThousandConnectAndCloseCyclesLeakNothing() throws Exception {
        int cycles = 10_000, threads = 8;
        try (ServerFixture fx = ServerFixture.memory(64L * MIB)) {
            byte[] d = pattern(31, 64 * KIB);
            try (RawClient c = fx.open("mem")) {
                assertThat(c.write(0, d, 0)).isZero();
            }
            // Warm up every path first, so that anything the server (or the JDK) opens once and keeps is in "before".
            for (int i = 0; i < 64; i++) cycle(fx, i);
            awaitDrained(fx, 0);
            long fdsBefore = openFds();

            Queue<String> failures = new ConcurrentLinkedQueue<>();
            AtomicInteger next = new AtomicInteger();
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            long start = System.nanoTime();
            try {
                List<Future<?>> workers = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    workers.add(pool.submit(() -> {
                        for (int i = next.getAndIncrement(); i < cycles; i = next.getAndIncrement()) {
                            try {
                                cycle(fx, i);
                            } catch (Throwable e) {
                                failures.add("cycle " + i + " (" + describeCycle(i) + "): " + e);
                                if (failures.size() > 20) return null;
                            }
                        }
                        return null;
                    }));
                }
                for (Future<?> f : workers) f.get(150, TimeUnit.SECONDS);
            } finally {
                pool.shutdownNow();
                assertThat(pool.awaitTermination(30, TimeUnit.SECONDS)).isTrue();
            }
            long took = System.nanoTime() - start;
            assertThat(failures).as("failed cycles").isEmpty();
            assertThat(next.get()).isGreaterThanOrEqualTo(cycles);

            awaitDrained(fx, 0);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (openFds() > fdsBefore + 16 && System.nanoTime() < deadline) Thread.sleep(20);
            long fdsAfter = openFds();
            System.out.printf("EngineBadInputTest: %d connect/close cycles in %.1f s; open descriptors %d before, %d after%n",
                cycles, took / 1e9, fdsBefore, fdsAfter);
            assertThat(fdsAfter).as("open descriptors after (before: %d)", fdsBefore).isLessThanOrEqualTo(fdsBefore + 16);
            assertThat(fx.server.bufferBytesInUse()).isZero();
            assertThat(fx.server.inputBuffersInUse()).as("receive buffers still lent").isZero();

            try (RawClient c = fx.open("mem", true, false)) {
                assertThat(c.read(0, d.length)).isEqualTo(d);
                byte[] e = pattern(32, 256 * KIB);
                assertThat(c.write(MIB, e, Nbd.CMD_FLAG_FUA)).isZero();
                assertThat(c.read(MIB, e.length)).isEqualTo(e);
                c.disconnect();
            }
            awaitDrained(fx, 0);
        }
    }

    /**
     * Three thousand short connections (handshake, one read, close) each get their read answered, and once they
     * are gone the process holds no more direct memory than before them (a closed connection must not keep its
     * buffers until some timer of its own runs out: here the handshake timeout is two minutes). The JVM's direct
     * memory is bounded (by -Xmx in the tests); a server that keeps 256 KiB for each recent connection runs out
     * of it after about two thousand, and hangs up on clients right after their handshake.
     */
    @Test
    void aLongStreamOfShortConnectionsIsServedAndHoldsNoMemoryAfterwards() throws Exception {
        int cycles = 3000, threads = 4;
        ServerConfig config = ServerConfig.defaults().withHandshakeTimeout(Duration.ofMinutes(2));
        try (ServerFixture fx = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(64L * MIB))), config)) {
            byte[] d = pattern(51, 64 * KIB);
            try (RawClient c = fx.open("mem")) {
                assertThat(c.write(0, d, 0)).isZero();
            }
            for (int i = 0; i < 32; i++) shortSession(fx, d, i);
            awaitDrained(fx, 0);
            long before = directMemoryAfterGc(0, Duration.ofSeconds(1));

            Queue<String> failures = new ConcurrentLinkedQueue<>();
            AtomicInteger next = new AtomicInteger();
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                List<Future<?>> workers = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    workers.add(pool.submit(() -> {
                        for (int i = next.getAndIncrement(); i < cycles && failures.size() < 20; i = next.getAndIncrement()) {
                            try {
                                shortSession(fx, d, i);
                            } catch (Throwable e) {
                                failures.add("connection " + i + ": " + e);
                            }
                        }
                        return null;
                    }));
                }
                for (Future<?> f : workers) f.get(150, TimeUnit.SECONDS);
            } finally {
                pool.shutdownNow();
                assertThat(pool.awaitTermination(30, TimeUnit.SECONDS)).isTrue();
            }
            awaitDrained(fx, 0);
            long after = directMemoryAfterGc(before + 32L * MIB, Duration.ofSeconds(10));
            System.out.printf("EngineBadInputTest: %d short connections; direct memory %d MiB before, %d MiB after%n",
                cycles, before >> 20, after >> 20);
            assertThat(failures).as("connections not served").isEmpty();
            assertThat(after).as("direct memory in use after the connections closed (before: %d)", before)
                .isLessThanOrEqualTo(before + 32L * MIB);
        }
    }

    /** Handshake, one 4 KiB read checked against {@code d}, then a close (a DISC first for every other one). */
    private static void shortSession(ServerFixture fx, byte[] d, int i) throws IOException {
        try (RawClient c = fx.open("mem", i % 2 == 0, false)) {
            int at = (i % 16) * 4 * KIB;
            assertThat(c.read(at, 4 * KIB)).isEqualTo(Arrays.copyOfRange(d, at, at + 4 * KIB));
            if (i % 4 < 2) c.disconnect();
        }
    }

    /**
     * The JVM's direct memory in use (direct buffers and native segments alike count against its limit), after
     * asking for garbage collections until it is at most {@code target} or {@code limit} has passed.
     */
    private static long directMemoryAfterGc(long target, Duration limit) throws InterruptedException {
        java.lang.management.BufferPoolMXBean direct = java.lang.management.ManagementFactory
            .getPlatformMXBeans(java.lang.management.BufferPoolMXBean.class).stream()
            .filter(b -> b.getName().equals("direct")).findFirst().orElseThrow();
        long deadline = System.nanoTime() + limit.toNanos();
        long used;
        do {
            System.gc();
            Thread.sleep(100); // the cleaner frees what the collection found unreachable
            used = direct.getMemoryUsed();
        } while (used > target && System.nanoTime() < deadline);
        return used;
    }

    private static String describeCycle(int i) {
        String[] stages = {"close at once", "close after the greeting", "close after the handshake", "close with a READ unanswered"};
        return stages[i % 4] + ((i / 4) % 2 == 1 ? ", reset" : ", FIN");
    }

    /** One connection, ended at the stage {@link #describeCycle} names. */
    private static void cycle(ServerFixture fx, int i) throws IOException {
        boolean reset = (i / 4) % 2 == 1;
        switch (i % 4) {
            case 0 -> {
                try (SocketChannel ch = SocketChannel.open(fx.address)) {
                    if (reset) ch.socket().setSoLinger(true, 0);
                }
            }
            case 1 -> {
                try (RawClient c = RawClient.connect(fx.address)) {
                    c.greeting();
                    if (reset) c.channel.socket().setSoLinger(true, 0);
                }
            }
            case 2 -> {
                try (RawClient c = fx.open("mem", (i / 8) % 2 == 0, false)) {
                    if (reset) c.channel.socket().setSoLinger(true, 0);
                }
            }
            default -> {
                try (RawClient c = fx.open("mem", (i / 8) % 2 == 0, false)) {
                    int length = (i / 8) % 4 < 2 ? 4 * KIB : MIB;
                    c.send(new Request(0, Nbd.CMD_READ, i, (long) (i % 16) * 4 * KIB, length));
                    if (reset) c.channel.socket().setSoLinger(true, 0);
                }
            }
        }
    }

    /** The process's open file descriptors, as /proc/self/fd lists them. */
    private static long openFds() throws IOException {
        try (Stream<Path> s = Files.list(Path.of("/proc/self/fd"))) {
            return s.count();
        }
    }

    // ------------------------------------------------------------------ 4. half-open clients

    /**
     * With a 3 s handshake and 2 s receive timeout: 200 clients that connect and send nothing, 50 that stop in the
     * middle of an option header, and 50 that finish the handshake and stop in the middle of a request header
     * are all hung up on (their sockets see the end of the stream, having been sent nothing but what was due),
     * while a client doing reads and writes all along is served. At the end the server holds that client only.
     */
    @Test
    void hundredsOfHalfOpenClientsAreDroppedWhileANormalClientIsServed() throws Exception {
        // The handshake timeout leaves the clients that do finish their handshake room to spare on a busy machine.
        ServerConfig config = ServerConfig.defaults().withHandshakeTimeout(Duration.ofSeconds(3))
            .withReceiveTimeout(Duration.ofSeconds(2));
        byte[] image = pattern(41, 4 * MIB);
        List<RawClient> halfOpen = new ArrayList<>();
        List<Thread> watchers = new ArrayList<>();
        try (ServerFixture fx = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(64L * MIB))), config);
             RawClient normal = fx.open("mem", true, false)) {
            assertThat(normal.write(0, image, 0)).isZero();

            // kind -> expected bytes from the server before the end of the stream
            Map<RawClient, String> kinds = new HashMap<>();
            for (int i = 0; i < 50; i++) {
                RawClient c = fx.open("mem", i % 2 == 0, false);
                halfOpen.add(c);
                kinds.put(c, "mid-request");
                c.write(encoded(new Request(0, Nbd.CMD_READ, 1, 0, 4096)).limit(1 + i % 27));
            }
            for (int i = 0; i < 50; i++) {
                RawClient c = RawClient.connect(fx.address);
                halfOpen.add(c);
                kinds.put(c, "mid-option");
                ByteBuffer b = ByteBuffer.allocate(4 + Nbd.OPTION_HEADER_SIZE);
                b.putInt(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
                io.jnbd.protocol.OptionHeader.encode(b, Nbd.OPT_GO, 32);
                c.write(b.flip().limit(4 + 1 + i % (Nbd.OPTION_HEADER_SIZE - 1)));
            }
            for (int i = 0; i < 200; i++) {
                RawClient c = RawClient.connect(fx.address);
                halfOpen.add(c);
                kinds.put(c, "silent");
            }

            Queue<String> wrong = new ConcurrentLinkedQueue<>();
            CountDownLatch ended = new CountDownLatch(halfOpen.size());
            AtomicInteger resets = new AtomicInteger();
            for (RawClient c : halfOpen) {
                String kind = kinds.get(c);
                watchers.add(Thread.ofVirtual().start(() -> {
                    try {
                        Received r = readUntilEnd(c.channel.socket().getInputStream());
                        if (r.reset) resets.incrementAndGet();
                        String problem = checkReceived(kind, r);
                        if (problem != null) wrong.add(kind + ": " + problem);
                    } catch (IOException | RuntimeException e) {
                        wrong.add(kind + ": " + e);
                    } finally {
                        ended.countDown();
                    }
                }));
            }

            // The normal client works all along, until every half-open client has been hung up on.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            int rounds = 0;
            do {
                byte[] d = pattern(1000 + rounds, 16 * KIB);
                long at = 8L * MIB + (rounds % 256) * 16L * KIB;
                assertThat(normal.write(at, d, 0)).isZero();
                assertThat(normal.read(at, d.length)).isEqualTo(d);
                int k = rounds % 16;
                assertThat(normal.read(k * 256L * KIB, 256 * KIB))
                    .isEqualTo(Arrays.copyOfRange(image, k * 256 * KIB, (k + 1) * 256 * KIB));
                rounds++;
            } while (!ended.await(20, TimeUnit.MILLISECONDS) && System.nanoTime() < deadline);

            assertThat(ended.getCount()).as("half-open clients not hung up on within 60 s").isZero();
            assertThat(wrong).as("half-open clients that saw something else than the end of the stream").isEmpty();
            System.out.printf("EngineBadInputTest: %d half-open clients dropped (%d by reset) during %d rounds of the normal client%n",
                halfOpen.size(), resets.get(), rounds);
            awaitDrained(fx, 1);
            byte[] d = pattern(2000, 64 * KIB);
            assertThat(normal.write(20L * MIB, d, Nbd.CMD_FLAG_FUA)).isZero();
            assertThat(normal.read(20L * MIB, d.length)).isEqualTo(d);
            assertThat(fx.server.connectionCount()).isEqualTo(1);
            normal.disconnect();
            awaitDrained(fx, 0);
        } finally {
            for (RawClient c : halfOpen) c.close();
            for (Thread t : watchers) t.join(TimeUnit.SECONDS.toMillis(30));
        }
    }

    /** What a client received before the connection ended, and whether it ended in a reset rather than a FIN. */
    private record Received(byte[] bytes, boolean reset) {}

    /** Reads until the end of the stream or a reset; a read timeout (RawClient's 20 s) is an IOException. */
    private static Received readUntilEnd(InputStream in) throws IOException {
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        byte[] b = new byte[4096];
        try {
            for (int n; (n = in.read(b)) >= 0; ) {
                out.write(b, 0, n);
                if (out.size() > 1 << 16) throw new IOException("the server keeps sending");
            }
            return new Received(out.toByteArray(), false);
        } catch (SocketTimeoutException e) {
            throw new IOException("not hung up on within " + RawClient.READ_TIMEOUT_MS + " ms (" + out.size() + " bytes received)", e);
        } catch (SocketException e) {
            return new Received(out.toByteArray(), true);
        }
    }

    /**
     * Null if {@code r} is what a client of this kind may receive: the greeting and nothing more for one that
     * never finished the handshake, nothing at all for one that stopped in a request header (a reset may cut
     * the greeting short, as the kernel discards what the client had not yet read).
     */
    private static String checkReceived(String kind, Received r) {
        byte[] greeting = ByteBuffer.allocate(16).putLong(Nbd.NBDMAGIC).putLong(Nbd.IHAVEOPT).array();
        byte[] got = r.bytes;
        if (kind.equals("mid-request")) return got.length == 0 ? null : "received " + got.length + " bytes after the handshake";
        if (got.length > 18) return "received " + got.length + " bytes, more than the greeting";
        if (!r.reset && got.length != 18) return "received " + got.length + " bytes before the end of the stream, not the greeting";
        int n = Math.min(got.length, 16);
        if (!Arrays.equals(got, 0, n, greeting, 0, n)) return "received something other than the greeting";
        return null;
    }

    // ------------------------------------------------------------------ helpers

    /** Waits (up to 10 s) until the server holds exactly {@code connections} connections and no buffer, then asserts it. */
    private static void awaitDrained(ServerFixture fx, int connections) throws InterruptedException {
        awaitUntil(() -> fx.server.connectionCount() == connections && fx.server.bufferBytesInUse() == 0, Duration.ofSeconds(10));
        assertThat(fx.server.connectionCount()).as("open connections").isEqualTo(connections);
        assertThat(fx.server.bufferBytesInUse()).as("buffer bytes on loan").isZero();
    }

    private static void awaitUntil(BooleanSupplier condition, Duration limit) throws InterruptedException {
        long deadline = System.nanoTime() + limit.toNanos();
        while (!condition.getAsBoolean() && System.nanoTime() < deadline) Thread.sleep(10);
    }

    private static ByteBuffer encoded(Request r) {
        ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE);
        r.encode(b);
        return b.flip();
    }
}
