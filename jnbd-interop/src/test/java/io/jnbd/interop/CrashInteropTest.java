package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.Random;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A crash right after a FLUSH: the server gets SIGKILL the moment the last FLUSH reply arrives, while
 * later WRITEs are still in flight, and a new server on the same file must give back every write that
 * was acknowledged before a FLUSH covering it was sent.
 *
 * <p>SIGKILL leaves the kernel's page cache alone, so this does not test the disk: it catches a server
 * that replies before the data has left the process (a write-back buffer in the JVM, a reply sent ahead
 * of its pwrite, a FLUSH answered while writes it covers still run on other threads). A power cut
 * is beyond a test.
 */
@Timeout(120)
class CrashInteropTest {

    private static final int KiB = 1024;
    private static final int MiB = 1 << 20;
    private static final long IMAGE_SIZE = 64L * MiB;
    /** Each WRITE lands in a slot of its own, so no byte is written twice and the model has one answer per byte. */
    private static final int SLOT = 256 * KiB;
    private static final int TRIALS = 3;
    private static final long FLUSH_COOKIE = 0; // WRITE cookies count from 1
    private static final int SIGKILL_EXIT = 128 + 9;
    private static final Duration T = Duration.ofSeconds(30);

    @TempDir
    Path dir;
    JnbdServer server;
    final List<RawNbdClient> clients = new ArrayList<>();
    final List<Thread> threads = new ArrayList<>();

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
    }

    @AfterEach
    void tearDown() throws Exception {
        closeClients();
        if (server != null) server.kill();
        for (Thread thread : threads) thread.join(10_000);
    }

    @ParameterizedTest(name = "mode={0}")
    @ValueSource(strings = {"cached", "direct"})
    void acknowledgedWritesSurviveSigkillRightAfterFlush(String mode) throws Exception {
        for (int trial = 1; trial <= TRIALS; trial++) {
            // A second connection in odd trials: a FLUSH must also wait for writes running on other threads.
            runTrial(mode, trial, trial % 2 == 1 ? 2 : 1);
        }
    }

    private void runTrial(String mode, int trial, int writerCount) throws Exception {
        long seed = (mode.equals("direct") ? 2000 : 1000) + trial;
        String what = "mode=" + mode + " trial " + trial + " (seed " + seed + ", " + writerCount
            + (writerCount == 1 ? " writer)" : " writers)");
        Path work = Files.createDirectories(dir.resolve(mode + "-" + trial));
        Path image = work.resolve("disk.img");
        String export = "disk=file:" + image + ",size=64M,mode=" + mode;
        server = JnbdServer.start(work, "--export", export);
        JnbdServer crashing = server;

        Model model = new Model();
        AtomicInteger flushesUnanswered = new AtomicInteger(writerCount);
        CountDownLatch killed = new CountDownLatch(1);
        List<Writer> writers = new ArrayList<>();
        long regionSize = IMAGE_SIZE / writerCount;
        for (int w = 0; w < writerCount; w++) {
            RawNbdClient client = RawNbdClient.open(server.port(), "disk");
            clients.add(client);
            writers.add(new Writer(w, client, model, w * regionSize, regionSize, new Random(seed * 10 + w)));
        }
        boolean multiConn = (writers.getFirst().client.transmissionFlags & RawNbdClient.FLAG_CAN_MULTI_CONN) != 0;

        for (Writer writer : writers) {
            threads.add(Thread.ofPlatform().name("crash-reader-" + writer.id).start(() -> writer.readReplies(() -> {
                // The kill must follow the last FLUSH reply at once: anything the server would have done
                // afterwards (a late pwrite, a flush on exit) is exactly what must not be needed.
                if (flushesUnanswered.decrementAndGet() == 0) {
                    model.crashed(); // first, so that the broken connections read as the crash, not as failures
                    crashing.kill9();
                    killed.countDown();
                }
            })));
            threads.add(Thread.ofPlatform().name("crash-writer-" + writer.id).start(writer::writeAll));
        }

        assertThat(killed.await(T.toSeconds(), TimeUnit.SECONDS))
            .as("%s: every FLUSH answered and the server killed within %s; log:%n%s", what, T, crashing.log())
            .isTrue();
        OptionalInt status = crashing.awaitExit(Duration.ofSeconds(10));
        assertThat(status).as("%s: exit status of the server (pid %d) after SIGKILL", what, crashing.pid())
            .hasValue(SIGKILL_EXIT);
        closeClients(); // unblocks a writer stuck in a send the dead server will never read
        for (Thread thread : threads) thread.join(10_000);
        threads.clear();

        for (Writer writer : writers) {
            assertThat(writer.failure).as("%s: writer %d before the crash; log:%n%s", what, writer.id, crashing.log())
                .isNull();
            assertThat(writer.flushError).as("%s: writer %d's FLUSH reply error", what, writer.id).isZero();
            assertThat(writer.errors).as("%s: writer %d's WRITEs with an error reply", what, writer.id).isEmpty();
        }
        List<Write> mustMatch = model.coveredByFlush(writers, multiConn);
        assertThat(mustMatch).as("%s: writes acknowledged before a FLUSH was sent", what).isNotEmpty();

        server = JnbdServer.start(work, "--export", export);
        try (RawNbdClient reader = RawNbdClient.open(server.port(), "disk")) {
            assertThat(reader.exportSize).as("%s: export size after the crash", what).isEqualTo(IMAGE_SIZE);
            for (Write write : mustMatch) {
                expectSame(reader.read(write.offset, write.data.length), write, what + ", read over NBD after the restart");
            }
        }
        assertThat(server.stop()).as("%s: exit status of the restarted server after SIGTERM; log:%n%s", what,
            server.log()).isZero();

        // The file itself too, past any server: what survives a crash must be in the file, not only in what jnbd serves.
        byte[] file = Files.readAllBytes(image);
        assertThat(file.length).as("%s: image size", what).isEqualTo((int) IMAGE_SIZE);
        for (Write write : mustMatch) {
            byte[] onDisk = Arrays.copyOfRange(file, (int) write.offset, (int) write.offset + write.data.length);
            expectSame(onDisk, write, what + ", read from the file");
        }
        // Bytes no WRITE was ever sent for must still be the zeroes of the fresh sparse file.
        boolean[] sent = new boolean[(int) (IMAGE_SIZE / 4096)];
        for (Writer writer : writers) {
            for (Write write : writer.sent()) {
                for (long b = write.offset; b < write.offset + write.data.length; b += 4096) sent[(int) (b / 4096)] = true;
            }
        }
        for (int block = 0; block < sent.length; block++) {
            if (sent[block]) continue;
            int from = block * 4096;
            if (!isZero(file, from, 4096)) fail("%s: bytes %d..%d were never written but are not zero", what, from, from + 4095);
        }

        int sentCount = writers.stream().mapToInt(w -> w.sent().size()).sum();
        int afterFlush = writers.stream().mapToInt(w -> w.sentAfterFlush).sum();
        System.out.printf("crash %s: %d WRITEs sent, %d acknowledged before a FLUSH and verified, %d sent after the FLUSH%n",
            what, sentCount, mustMatch.size(), afterFlush);
        server = null;
    }

    private void closeClients() {
        for (RawNbdClient client : clients) {
            try {
                client.close();
            } catch (IOException ignored) {
                // the server is gone; the socket is closed either way
            }
        }
        clients.clear();
    }

    /** Fails naming the first differing byte and whether the write is missing (zeroes) or wrong: 256 KiB of
     *  numbers would say neither. */
    private static void expectSame(byte[] actual, Write write, String what) {
        int at = Arrays.mismatch(actual, write.data);
        if (at < 0) return;
        int differing = 0;
        for (int i = 0; i < write.data.length; i++) {
            if (i >= actual.length || actual[i] != write.data[i]) differing++;
        }
        fail("%s: writer %d's WRITE cookie %d (%d bytes at %d), acknowledged before a FLUSH was sent, differs from "
                + "byte %d on: %d bytes differ, read %s", what, write.writer, write.cookie, write.data.length,
            write.offset, at, differing, isZero(actual, 0, actual.length) ? "all zeroes (the write is lost)" : "other data");
    }

    private static boolean isZero(byte[] data, int from, int length) {
        for (int i = from; i < from + length; i++) {
            if (data[i] != 0) return false;
        }
        return true;
    }

    /** One WRITE request; {@code ackSeq} (-1 until a successful reply arrives) is guarded by the {@link Model}. */
    private static final class Write {
        final int writer;
        final long cookie;
        final long offset;
        final byte[] data;
        long ackSeq = -1;

        Write(int writer, long cookie, long offset, byte[] data) {
            this.writer = writer;
            this.cookie = cookie;
            this.offset = offset;
            this.data = data;
        }
    }

    /**
     * Orders, across connections, each WRITE reply received against each FLUSH sent. A reply that came
     * in before a FLUSH went out is covered by it; one that came in after may or may not be (the server
     * may have handled the FLUSH first), so it is not asserted.
     */
    private static final class Model {
        private long seq;
        private boolean crashed;

        synchronized long next() {
            return seq++;
        }

        synchronized void crashed() {
            crashed = true;
            notifyAll();
        }

        synchronized boolean isCrashed() {
            return crashed;
        }

        /**
         * The writes a FLUSH covers: its own connection's acknowledged before it was sent, and, when the
         * server advertises NBD_FLAG_CAN_MULTI_CONN, those acknowledged on any connection before it was sent.
         */
        synchronized List<Write> coveredByFlush(List<Writer> writers, boolean multiConn) {
            long latestFlush = writers.stream().mapToLong(w -> w.flushSentSeq).max().orElseThrow();
            List<Write> covered = new ArrayList<>();
            for (Writer writer : writers) {
                long flushSeq = multiConn ? latestFlush : writer.flushSentSeq;
                for (Write write : writer.writes.values()) {
                    if (write.ackSeq >= 0 && write.ackSeq < flushSeq) covered.add(write);
                }
            }
            return covered;
        }
    }

    /**
     * One connection: pipelined WRITEs to fresh slots of its own region, a FLUSH once most of them are
     * acknowledged (some still in flight), then more WRITEs until the server dies.
     */
    private static final class Writer {
        final int id;
        final RawNbdClient client;
        final Model model;
        final Random random;
        final Deque<Long> freeSlots = new ArrayDeque<>();
        /** By cookie; guarded by the model. */
        final Map<Long, Write> writes = new HashMap<>();
        final List<Long> errors = new CopyOnWriteArrayList<>();
        int replies; // guarded by the model
        long flushSentSeq = -1; // guarded by the model
        volatile int flushError = -1;
        volatile int sentAfterFlush;
        volatile Throwable failure;
        private boolean ended; // guarded by the model

        Writer(int id, RawNbdClient client, Model model, long regionStart, long regionSize, Random random) {
            this.id = id;
            this.client = client;
            this.model = model;
            this.random = random;
            List<Long> slots = new ArrayList<>();
            for (long slot = regionStart; slot < regionStart + regionSize; slot += SLOT) slots.add(slot);
            Collections.shuffle(slots, random);
            freeSlots.addAll(slots);
        }

        List<Write> sent() {
            synchronized (model) {
                return List.copyOf(writes.values());
            }
        }

        void writeAll() {
            try {
                int beforeFlush = 24 + random.nextInt(40);
                for (int i = 0; i < beforeFlush; i++) sendWrite();
                // Leave a few WRITEs unanswered when the FLUSH goes out: they are the ones it need not cover.
                int stillInFlight = random.nextInt(9);
                synchronized (model) {
                    long deadline = System.nanoTime() + T.toNanos();
                    while (replies < beforeFlush - stillInFlight && !ended) {
                        long left = deadline - System.nanoTime();
                        if (left <= 0) throw new IOException("no replies to " + beforeFlush + " WRITEs within " + T);
                        TimeUnit.NANOSECONDS.timedWait(model, left);
                    }
                    if (ended) return;
                    // Taken before the request leaves, so a reply that races with it counts as after.
                    flushSentSeq = model.next();
                }
                client.send(RawNbdClient.CMD_FLUSH, FLUSH_COOKIE, 0, 0, null);
                while (!freeSlots.isEmpty() && !model.isCrashed()) {
                    sendWrite();
                    sentAfterFlush++;
                }
            } catch (IOException | InterruptedException e) {
                if (!model.isCrashed()) failure = e;
            }
        }

        private void sendWrite() throws IOException {
            long slot = freeSlots.removeFirst();
            int size = 4 * KiB * (1 + random.nextInt(SLOT / (4 * KiB)));
            long offset = slot + 4L * KiB * random.nextInt((SLOT - size) / (4 * KiB) + 1);
            byte[] data = new byte[size];
            random.nextBytes(data);
            Write write;
            synchronized (model) {
                write = new Write(id, writes.size() + 1L, offset, data);
                writes.put(write.cookie, write);
            }
            client.send(RawNbdClient.CMD_WRITE, write.cookie, offset, size, data);
        }

        void readReplies(Runnable onFlushReply) {
            try {
                while (true) {
                    RawNbdClient.Reply reply = client.readReply();
                    if (reply.cookie() == FLUSH_COOKIE) {
                        flushError = reply.error();
                        onFlushReply.run();
                        continue;
                    }
                    synchronized (model) {
                        Write write = writes.get(reply.cookie());
                        if (write == null || write.ackSeq >= 0) {
                            throw new IOException("reply with unknown or repeated cookie " + reply.cookie());
                        }
                        if (reply.error() == 0) {
                            write.ackSeq = model.next();
                        } else {
                            errors.add(reply.cookie());
                        }
                        replies++;
                        model.notifyAll();
                    }
                }
            } catch (IOException e) {
                if (!model.isCrashed()) failure = e;
            } finally {
                synchronized (model) {
                    ended = true;
                    model.notifyAll();
                }
            }
        }
    }
}
