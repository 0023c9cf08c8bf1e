package io.jnbd.client;

import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Arrays;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The reader's poll for a reply that is due: what it hands back from the socket, when it gives up and lets the
 * reader sleep, and that a connection's reader still gets every reply, end of stream and close right with it.
 */
class ReplySpinTest {

    @Test
    void pollsInTestsAsUnderBinJnbd() {
        // surefire grants native access, as bin/jnbd does: every client test here runs its reader with the poll.
        assertThat(ReplySpin.AVAILABLE).isTrue();
    }

    @Test
    void handsBackWhatTheSocketHoldsAndEndOfStream() throws Exception {
        try (var pair = new Pair()) {
            ReplySpin spin = ReplySpin.of(() -> 1, pair.transport);
            assertThat(spin).isNotNull();
            pair.peer.write(ByteBuffer.wrap(new byte[] {1, 2, 3}));
            ByteBuffer in = ByteBuffer.allocateDirect(64);
            int n = 0;
            // Loopback delivers at once; the poll returns as soon as the bytes are there.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (n == 0 && System.nanoTime() < deadline) n = spin.read(in);
            assertThat(n).isEqualTo(3);
            assertThat(in.flip().get(0)).isEqualTo((byte) 1);
            assertThat(in.get(2)).isEqualTo((byte) 3);
            pair.peer.close();
            in.clear();
            n = 0;
            while (n == 0 && System.nanoTime() < deadline) n = spin.read(in);
            assertThat(n).isEqualTo(-1);
        }
    }

    @Test
    void nothingInFlightMeansNoPoll() throws Exception {
        try (var pair = new Pair()) {
            AtomicInteger inFlight = new AtomicInteger();
            ReplySpin spin = ReplySpin.of(inFlight::get, pair.transport);
            pair.peer.write(ByteBuffer.wrap(new byte[] {7}));
            ByteBuffer in = ByteBuffer.allocateDirect(64);
            // Bytes wait in the socket, but with no request in flight the reader is sent to its blocking read.
            for (int i = 0; i < 100; i++) assertThat(spin.read(in)).isZero();
            assertThat(in.position()).isZero();
        }
    }

    @Test
    void anEmptyPollEndsAtTheLimitAndMakesTheNextOnesRarer() throws Exception {
        try (var pair = new Pair()) {
            ReplySpin spin = ReplySpin.of(() -> 1, pair.transport);
            ByteBuffer in = ByteBuffer.allocateDirect(64);
            long start = System.nanoTime();
            assertThat(spin.read(in)).isZero();
            assertThat(System.nanoTime() - start).isGreaterThanOrEqualTo(ReplySpin.LIMIT_NANOS);
            // One miss: the next wait does not poll, even with bytes already there.
            pair.peer.write(ByteBuffer.wrap(new byte[] {9}));
            assertThat(spin.read(in)).isZero();
            assertThat(in.position()).isZero();
        }
    }

    @Test
    void oneRequestAtATimeReadsEveryByteRight() throws Exception {
        byte[] disk = FakeNbdServer.content(1 << 20);
        try (var server = new FakeNbdServer(disk, FakeNbdServer.Mode.REVERSE);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults())) {
            java.util.Random random = new java.util.Random(35);
            for (int i = 0; i < 2000; i++) {
                int length = (1 + random.nextInt(16)) * 4096;
                long offset = (long) random.nextInt((disk.length - length) / 512) * 512;
                ByteBuffer buf = ByteBuffer.allocateDirect(length);
                client.read(offset, buf).get(10, TimeUnit.SECONDS);
                byte[] got = new byte[length];
                buf.get(0, got);
                assertThat(Arrays.mismatch(got, Arrays.copyOfRange(disk, (int) offset, (int) offset + length)))
                    .as("first wrong byte of read %d at %d", i, offset).isEqualTo(-1);
            }
        }
    }

    @Test
    void aReplyLateBeyondThePollStillArrives() throws Exception {
        byte[] disk = FakeNbdServer.content(1 << 20);
        try (var server = new FakeNbdServer(disk, FakeNbdServer.Mode.GATED);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults())) {
            ByteBuffer buf = ByteBuffer.allocateDirect(4096);
            var read = client.read(8192, buf);
            Thread.sleep(50); // a thousand times the poll: the reader sleeps in read by now
            assertThat(read).isNotDone();
            server.openGate();
            read.get(10, TimeUnit.SECONDS);
            assertThat(buf.get(0)).isEqualTo(disk[8192]);
            assertThat(buf.get(4095)).isEqualTo(disk[8192 + 4095]);
        }
    }

    @Test
    void aDroppedConnectionFailsTheRequestInFlight() throws Exception {
        try (var server = new FakeNbdServer(FakeNbdServer.content(1 << 20), FakeNbdServer.Mode.DROP);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults())) {
            var read = client.read(0, ByteBuffer.allocateDirect(4096));
            assertThatThrownBy(() -> read.get(10, TimeUnit.SECONDS)).isInstanceOf(ExecutionException.class)
                .cause().isInstanceOf(NbdConnectionException.class);
        }
    }

    @Test
    void closingWithAReplyDueEndsTheRequestAndReturns() throws Exception {
        try (var server = new FakeNbdServer(FakeNbdServer.content(1 << 20), FakeNbdServer.Mode.SILENT)) {
            // close waits for requests in flight up to the request timeout, then ends them
            var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestTimeout(java.time.Duration.ofMillis(300)));
            var read = client.read(0, ByteBuffer.allocateDirect(4096));
            Thread closer = Thread.ofPlatform().start(client::close);
            closer.join(TimeUnit.SECONDS.toMillis(10));
            assertThat(closer.isAlive()).as("close still running").isFalse();
            assertThatThrownBy(() -> read.get(10, TimeUnit.SECONDS)).isInstanceOf(ExecutionException.class);
        }
    }

    /** A connected loopback pair: the client's end as a plain transport, the peer's as a channel. */
    private static final class Pair implements AutoCloseable {
        final SocketChannel peer;
        final SocketChannel socket;
        final Transport transport;

        Pair() throws Exception {
            try (ServerSocketChannel listener = ServerSocketChannel.open()
                .bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))) {
                socket = SocketChannel.open(listener.getLocalAddress());
                peer = listener.accept();
            }
            transport = Transport.plain(socket);
        }

        @Override
        public void close() throws Exception {
            peer.close();
            transport.close();
        }
    }
}
