package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.net.Transports;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(30)
class BusyPollTest {
    private static final long LIMIT = 200_000; // 200 µs

    private SocketChannel client, server;

    @BeforeEach
    void connect() throws Exception {
        try (ServerSocketChannel listener = ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0))) {
            client = SocketChannel.open(listener.getLocalAddress());
            server = listener.accept();
        }
    }

    @AfterEach
    void close() throws Exception {
        client.close();
        server.close();
    }

    @Test
    void returnsBytesAlreadyWaitingAndEndOfStream() throws Exception {
        BusyPoll poll = new BusyPoll(Transports.plain(server), LIMIT);
        client.write(ByteBuffer.wrap(new byte[] {1, 2, 3}));
        ByteBuffer in = ByteBuffer.allocateDirect(16);
        int n = 0;
        for (int i = 0; i < 1000 && n == 0; i++) n = poll.poll(in);
        assertThat(n).isEqualTo(3);
        assertThat(in.flip().get(2)).isEqualTo((byte) 3);
        client.close();
        in.clear();
        int end = 0;
        for (int i = 0; i < 1000 && end == 0; i++) end = poll.poll(in);
        assertThat(end).isEqualTo(-1);
    }

    @Test
    void anEmptyPollBacksOffAndLeavesTheReadToTheCaller() throws Exception {
        BusyPoll poll = new BusyPoll(Transports.plain(server), LIMIT);
        ByteBuffer in = ByteBuffer.allocateDirect(16);
        long start = System.nanoTime();
        assertThat(poll.poll(in)).as("nothing was sent").isZero();
        assertThat(System.nanoTime() - start).as("it polled for the limit").isGreaterThanOrEqualTo(LIMIT);
        // After a miss the next wait does not poll at all: data sent now is left for the caller's read.
        client.write(ByteBuffer.wrap(new byte[] {7}));
        Thread.sleep(20);
        assertThat(poll.poll(in)).as("skipped after a miss").isZero();
        assertThat(in.position()).isZero();
        assertThat(poll.poll(in)).as("polls again").isEqualTo(1);
    }

    @Test
    void aConnectionWhoseRequestsAreAlwaysWaitingStopsPolling() throws Exception {
        BusyPoll poll = new BusyPoll(Transports.plain(server), LIMIT);
        ByteBuffer in = ByteBuffer.allocateDirect(16);
        // Bytes are always there before the poll: the mean gap falls to nothing, and within a few dozen
        // waits the poll stops and leaves the bytes to the caller's ordinary read.
        int stoppedAt = -1;
        for (int i = 0; i < 40 && stoppedAt < 0; i++) {
            client.write(ByteBuffer.wrap(new byte[] {1}));
            Thread.sleep(1);
            in.clear();
            int n = poll.poll(in);
            if (n == 0) {
                stoppedAt = i;
                assertThat(in.position()).isZero();
                assertThat(server.read(in)).isEqualTo(1);
            } else {
                assertThat(n).isEqualTo(1);
            }
        }
        assertThat(stoppedAt).as("polling stopped").isBetween(1, 39);
    }

    @Test
    void aLargeWritePayloadLeavesTheNextWaitToTheCaller() throws Exception {
        BusyPoll poll = new BusyPoll(Transports.plain(server), LIMIT);
        ByteBuffer in = ByteBuffer.allocateDirect(16);
        client.write(ByteBuffer.wrap(new byte[] {1}));
        Thread.sleep(20);
        poll.afterLargePayload(true);
        assertThat(poll.poll(in)).as("after a large payload").isZero();
        assertThat(in.position()).isZero();
        poll.afterLargePayload(false);
        assertThat(poll.poll(in)).as("after a small one it polls again").isEqualTo(1);
    }

    @Test
    void zeroLimitNeverPolls() throws Exception {
        BusyPoll poll = new BusyPoll(Transports.plain(server), 0);
        client.write(ByteBuffer.wrap(new byte[] {1}));
        Thread.sleep(20);
        assertThat(poll.poll(ByteBuffer.allocateDirect(16))).isZero();
    }
}
