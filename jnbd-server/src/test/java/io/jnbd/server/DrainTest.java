package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The drain of a stopping server (Drain): writes it had read are answered and flushed, requests read after it
 * began get NBD_ESHUTDOWN, options of a client still in its handshake get NBD_REP_ERR_SHUTDOWN, and the timeout
 * or {@link NbdServer#endDrainNow} end the wait at once. The writes are held in the export until the test lets
 * them go, so that which requests were read before the drain is known, not guessed from timing.
 */
@Timeout(60)
class DrainTest {
    /** Above what a reader thread writes itself (Placement), so that a held write holds an I/O thread, not the reader. */
    private static final int SIZE = 128 * 1024;

    /** Holds every write until {@link #release}, counting those that arrived and the flushes. */
    static final class HeldWrites extends FilterBackend {
        final CountDownLatch gate = new CountDownLatch(1);
        final AtomicInteger arrived = new AtomicInteger();
        final AtomicInteger flushes = new AtomicInteger();

        HeldWrites(long size) {
            super(new MemoryBackend(size));
        }

        @Override
        public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
            hold();
            super.write(offset, src, fua);
        }

        @Override
        public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
            hold();
            super.write(offset, srcs, fua);
        }

        @Override
        public void flush() throws IOException {
            flushes.incrementAndGet();
            super.flush();
        }

        /** The data stays readable after the server has closed its exports; the test frees it. */
        @Override
        public void close() {}

        private void hold() throws IOException {
            arrived.incrementAndGet();
            try {
                gate.await();
            } catch (InterruptedException e) {
                throw new java.io.InterruptedIOException();
            }
        }

        void awaitArrived(int n) throws InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (arrived.get() < n) {
                assertThat(System.nanoTime()).as("%d writes reached the export", n).isLessThan(deadline);
                Thread.sleep(5);
            }
        }

        void release() {
            gate.countDown();
        }
    }

    private HeldWrites backend;
    private ServerFixture fx;
    private Thread stopper;

    private void start() throws IOException {
        backend = new HeldWrites(4 << 20);
        fx = new ServerFixture(List.of(new Export("e", "", backend)));
    }

    @AfterEach
    void tearDown() throws InterruptedException, IOException {
        if (backend != null) backend.release();
        if (fx != null) fx.close();
        if (stopper != null) stopper.join(TimeUnit.SECONDS.toMillis(20));
        if (backend != null) backend.inner().close();
    }

    /** Waits until exactly {@code n} requests are read and unanswered (a reply reaches the client a moment before that). */
    private void awaitInFlight(int n) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (fx.server.requestsInFlight() != n) {
            assertThat(System.nanoTime()).as("%d requests read", n).isLessThan(deadline);
            Thread.sleep(5);
        }
    }

    /** Starts the drain on a thread of its own, as a signal handler does, and waits until it has begun. */
    private void stopInBackground(Duration timeout) throws InterruptedException {
        stopper = Thread.ofPlatform().name("stopper").start(() -> fx.server.stop(timeout));
        while (!fx.server.isStopping()) Thread.sleep(2);
    }

    @Test
    void writesReadBeforeTheDrainAreAnsweredAndLaterRequestsGetEshutdown() throws Exception {
        start();
        try (RawClient client = fx.open("e")) {
            for (int i = 0; i < 3; i++) client.send(new Request(0, Nbd.CMD_WRITE, 10 + i, (long) i * SIZE, SIZE), pattern(i, SIZE));
            backend.awaitArrived(1);
            awaitInFlight(3);
            stopInBackground(Duration.ofSeconds(30));

            // Read after the drain began: refused, a write's payload read and dropped, nothing reaches the export.
            assertThat(client.call(new Request(0, Nbd.CMD_WRITE, 20, 8 * SIZE, SIZE), pattern(9, SIZE))).isEqualTo(Nbd.ESHUTDOWN);
            assertThat(client.call(new Request(0, Nbd.CMD_READ, 21, 0, SIZE))).isEqualTo(Nbd.ESHUTDOWN);
            assertThat(client.call(new Request(0, Nbd.CMD_FLUSH, 22, 0, 0))).isEqualTo(Nbd.ESHUTDOWN);
            assertThat(stopper.isAlive()).as("the drain waits for the writes it had read").isTrue();

            backend.release();
            for (int i = 0; i < 3; i++) {
                RawClient.Reply reply = client.readReply();
                assertThat(reply.error()).as("write %d, read before the drain", reply.cookie()).isZero();
            }
            assertThat(client.drainUntilClosed()).as("closed once answered").isTrue();
        }
        stopper.join(TimeUnit.SECONDS.toMillis(20));
        assertThat(stopper.isAlive()).isFalse();
        Drain.Outcome outcome = fx.server.drain().outcome();
        assertThat(outcome.cutBy()).isNull();
        assertThat(outcome.connections()).isEqualTo(1);
        assertThat(outcome.answered()).isEqualTo(3);
        assertThat(outcome.refused()).isEqualTo(3);
        assertThat(outcome.flushed()).isTrue();
        assertThat(backend.arrived.get()).as("the refused write never reached the export").isLessThanOrEqualTo(3);
        ByteBuffer refused = ByteBuffer.allocate(SIZE);
        backend.inner().read(8 * SIZE, refused);
        assertThat(refused.array()).as("the refused write's range").containsOnly(0);
        assertThat(backend.flushes.get()).as("flushed by the drain (and once more at close)").isGreaterThanOrEqualTo(1);
        for (int i = 0; i < 3; i++) {
            ByteBuffer b = ByteBuffer.allocate(SIZE);
            backend.inner().read((long) i * SIZE, b);
            assertThat(b.array()).as("write %d", i).isEqualTo(pattern(i, SIZE));
        }
    }

    @Test
    void aClientInItsHandshakeGetsErrShutdownForItsOptions() throws Exception {
        start();
        try (RawClient busy = fx.open("e"); RawClient haggling = RawClient.connect(fx.address)) {
            haggling.greeting();
            haggling.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
            busy.send(new Request(0, Nbd.CMD_WRITE, 1, 0, SIZE), pattern(1, SIZE));
            backend.awaitArrived(1);
            stopInBackground(Duration.ofSeconds(30));

            RawClient.OptionReply reply = haggling.option(Nbd.OPT_LIST, new byte[0]);
            assertThat(reply.type()).isEqualTo(Nbd.REP_ERR_SHUTDOWN);

            backend.release();
            assertThat(busy.readReply().error()).isZero();
            assertThat(haggling.drainUntilClosed()).as("closed at the end of the drain").isTrue();
        }
    }

    @Test
    void theTimeoutClosesWhatIsStillInFlight() throws Exception {
        start();
        try (RawClient client = fx.open("e")) {
            client.send(new Request(0, Nbd.CMD_WRITE, 1, 0, SIZE), pattern(1, SIZE));
            backend.awaitArrived(1);
            long start = System.nanoTime();
            stopInBackground(Duration.ofMillis(300));
            assertThat(client.drainUntilClosed()).as("closed when the drain timed out").isTrue();
            stopper.join(TimeUnit.SECONDS.toMillis(20));
            assertThat(stopper.isAlive()).isFalse();
            assertThat(Duration.ofNanos(System.nanoTime() - start)).isGreaterThanOrEqualTo(Duration.ofMillis(300));
        }
        Drain.Outcome outcome = fx.server.drain().outcome();
        assertThat(outcome.cutBy()).startsWith("timed out");
        assertThat(outcome.abandoned()).isEqualTo(1);
        assertThat(outcome.answered()).isZero();
        assertThat(outcome.flushed()).as("the exports are flushed and closed all the same").isTrue();
    }

    @Test
    void aConnectionStillBusyHoldsUpNoOther() throws Exception {
        start();
        try (RawClient busy = fx.open("e"); RawClient idle = fx.open("e"); RawClient answered = fx.open("e")) {
            busy.send(new Request(0, Nbd.CMD_WRITE, 1, 0, SIZE), pattern(1, SIZE));
            backend.awaitArrived(1);
            assertThat(answered.read(SIZE, SIZE)).hasSize(SIZE); // (every write is held)
            stopInBackground(Duration.ofMinutes(10));

            assertThat(idle.drainUntilClosed()).as("an idle client is closed at once").isTrue();
            assertThat(answered.drainUntilClosed()).as("a client whose requests are answered is closed at once").isTrue();
            assertThat(stopper.isAlive()).as("while the drain still waits for the busy one").isTrue();

            backend.release();
            assertThat(busy.readReply().error()).isZero();
            assertThat(busy.drainUntilClosed()).isTrue();
        }
        stopper.join(TimeUnit.SECONDS.toMillis(20));
        assertThat(fx.server.drain().outcome().connections()).isEqualTo(3);
        assertThat(fx.server.drain().outcome().cutBy()).isNull();
    }

    @Test
    void endDrainNowEndsTheWaitAtOnce() throws Exception {
        start();
        try (RawClient client = fx.open("e")) {
            client.send(new Request(0, Nbd.CMD_WRITE, 1, 0, SIZE), pattern(1, SIZE));
            backend.awaitArrived(1);
            stopInBackground(Duration.ofMinutes(10));
            Thread.sleep(50);
            assertThat(stopper.isAlive()).as("draining").isTrue();
            fx.server.endDrainNow();
            assertThat(client.drainUntilClosed()).isTrue();
            stopper.join(TimeUnit.SECONDS.toMillis(20));
            assertThat(stopper.isAlive()).as("stop returned after endDrainNow, long before its timeout").isFalse();
        }
        assertThat(fx.server.drain().outcome().cutBy()).isEqualTo("cut short by a second signal");
    }

    @Test
    void idleClientsAreClosedWithoutWaitingForTheTimeout() throws Exception {
        start();
        try (RawClient client = fx.open("e")) {
            assertThat(client.read(0, SIZE)).hasSize(SIZE);
            awaitInFlight(0);
            fx.server.stop(Duration.ofMinutes(10));
            assertThat(client.drainUntilClosed()).isTrue();
        }
        Drain.Outcome outcome = fx.server.drain().outcome();
        assertThat(outcome.cutBy()).isNull();
        assertThat(outcome.connections()).isEqualTo(1);
        assertThat(outcome.answered()).isZero();
        assertThat(outcome.describe()).startsWith("drain: 1 connection, 0 requests answered, 0 refused with ESHUTDOWN, exports flushed, in ");
    }

    /**
     * A client in the middle of its TLS handshake when the drain begins cannot be told anything in NBD: it is
     * closed at the drain's end, and the drain does not wait for it (here, with nothing else in flight, the stop
     * returns long before the handshake timeout and the drain timeout).
     */
    @Test
    void aTlsHandshakeInProgressIsClosedAndHoldsNothingUp() throws Exception {
        backend = new HeldWrites(4 << 20);
        NbdServer server = new NbdServer(new Exports(List.of(new Export("e", "", backend)), null),
            ServerConfig.defaults().withHandshakeTimeout(Duration.ofMinutes(5)), new ServerTls(ServerTls.Mode.ON, new NullTls()));
        try (RawClient c = RawClient.connect(server.listen(new java.net.InetSocketAddress("127.0.0.1", 0)))) {
            c.greeting();
            c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
            assertThat(c.option(Nbd.OPT_STARTTLS, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            // ... and no ClientHello: the server waits inside the TLS handshake.
            stopper = Thread.ofPlatform().name("stopper").start(() -> server.stop(Duration.ofMinutes(10)));
            stopper.join(TimeUnit.SECONDS.toMillis(20));
            assertThat(stopper.isAlive()).as("the drain did not wait for the TLS handshake").isFalse();
            assertThat(c.drainUntilClosed()).as("the client in its TLS handshake was closed").isTrue();
        } finally {
            server.stop(Duration.ZERO);
        }
        assertThat(server.drain().outcome().connections()).as("a handshake is no connection to drain").isZero();
    }
}
