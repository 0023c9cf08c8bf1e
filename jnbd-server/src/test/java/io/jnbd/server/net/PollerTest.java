package io.jnbd.server.net;

import static org.assertj.core.api.Assertions.assertThat;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The poller's count of connections woken and not yet running decides whether a busy poll gives its carrier
 * up; a count that drifted upward would switch busy polling off for good, one that drifted below zero would
 * never let a poll yield.
 */
class PollerTest {

    @Test
    void everyWakeUpIsCountedOutAgain() throws Exception {
        try (ServerSocketChannel listener = ServerSocketChannel.open()) {
            listener.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            int n = 50;
            List<SocketChannel> clients = new ArrayList<>();
            List<Transport> servers = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                clients.add(SocketChannel.open(listener.getLocalAddress()));
                servers.add(Transports.plain(listener.accept()));
            }
            CountDownLatch received = new CountDownLatch(n);
            List<Thread> readers = new ArrayList<>();
            for (Transport t : servers) {
                readers.add(Thread.ofVirtual().start(() -> {
                    try {
                        ByteBuffer b = ByteBuffer.allocate(4);
                        // a timeout shorter than the test's pauses: some waits end by timing out, not by a wake-up
                        while (b.hasRemaining()) {
                            if (t.awaitReadable(5)) t.receiveNow(b);
                        }
                        received.countDown();
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                }));
            }
            Thread.sleep(50);
            for (SocketChannel c : clients) c.write(ByteBuffer.wrap(new byte[] {1, 2}));
            Thread.sleep(20);
            for (SocketChannel c : clients) c.write(ByteBuffer.wrap(new byte[] {3, 4}));
            assertThat(received.await(30, TimeUnit.SECONDS)).isTrue();
            for (Thread r : readers) r.join(10_000);

            assertThat(Poller.wokenWaiting()).as("woken connections still counted once all have run").isFalse();

            // Closing connections whose readers wait also wakes them (shutdown), and is counted out the same way.
            CountDownLatch ended = new CountDownLatch(n);
            for (Transport t : servers) {
                Thread.ofVirtual().start(() -> {
                    try {
                        ByteBuffer b = ByteBuffer.allocate(1);
                        while (t.receive(b) >= 0 && b.hasRemaining()) {
                            // keeps waiting until shutdown
                        }
                    } catch (Exception ignored) {
                        // a shut-down socket may also fail the receive
                    } finally {
                        ended.countDown();
                    }
                });
            }
            Thread.sleep(50);
            for (Transport t : servers) t.shutdown();
            assertThat(ended.await(30, TimeUnit.SECONDS)).isTrue();
            Thread.sleep(50);
            assertThat(Poller.wokenWaiting()).isFalse();
            for (Transport t : servers) t.close();
            for (SocketChannel c : clients) c.close();
        }
    }
}
