package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import java.io.IOException;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A thousand clients that connect at the same moment (a cluster of hosts booting, a storm of reconnects after
 * a network blip) are all served promptly. The kernel holds connections the server has not yet accepted in the
 * listener's accept queue, whose length is the backlog given to listen(). When a burst overflows it, the kernel
 * drops handshake packets: a dropped SYN costs its client a retransmission a second or more later; worse, with
 * SYN cookies a client whose final ACK is dropped believes it is connected while the server knows nothing of
 * it, and as in NBD the server speaks first, that client sends nothing that could repair it and waits for a
 * greeting that never comes (here until RawClient's read timeout).
 */
@Timeout(120)
class ManyConnectionsTest {
    static final int CLIENTS = 1000;
    static final long LIMIT_NANOS = TimeUnit.SECONDS.toNanos(10);
    /** How long to keep waiting past the limit, only so that a failure can say what became of the stragglers. */
    static final long GRACE_NANOS = TimeUnit.SECONDS.toNanos(40);
    static final int BLOCK = 4096;
    static final int BLOCKS = 16;

    @Test
    void aThousandSimultaneousConnectsAllReachTransmissionWithinTenSeconds() throws Exception {
        Map<String, Long> before = tcpCounters();
        try (ServerFixture fx = ServerFixture.memory(64L << 20)) {
            // Data for the clients to read back, so that a successful read proves the connection is served.
            try (RawClient seed = fx.open("mem")) {
                assertThat(seed.write(0, pattern(1, BLOCKS * BLOCK), 0)).isZero();
            }
            byte[] expected = pattern(1, BLOCKS * BLOCK);

            SocketChannel[] channels = new SocketChannel[CLIENTS];
            long[] doneAt = new long[CLIENTS];
            Arrays.fill(doneAt, -1);
            String[] stage = new String[CLIENTS];
            Map<Integer, Throwable> failures = new ConcurrentHashMap<>();
            CountDownLatch done = new CountDownLatch(CLIENTS);
            List<Thread> threads = new ArrayList<>(CLIENTS);
            long start = System.nanoTime();
            try {
                // Every SYN leaves before any handshake starts: non-blocking connects from one thread are as close
                // to simultaneous as one process gets.
                for (int i = 0; i < CLIENTS; i++) {
                    SocketChannel ch = SocketChannel.open();
                    channels[i] = ch;
                    ch.configureBlocking(false);
                    ch.connect(fx.address);
                }
                long connectsSent = System.nanoTime() - start;
                for (int i = 0; i < CLIENTS; i++) {
                    int id = i;
                    threads.add(Thread.ofVirtual().name("client-" + id).start(() -> {
                        try {
                            SocketChannel ch = channels[id];
                            stage[id] = "connect";
                            ch.configureBlocking(true);
                            ch.finishConnect();
                            RawClient c = RawClient.over(ch);
                            // The server speaks first: a client whose connection the server never accepted
                            // waits here for the greeting.
                            stage[id] = "handshake";
                            c.negotiate("mem", false, false, List.of(Nbd.INFO_BLOCK_SIZE));
                            stage[id] = "read";
                            int block = id % BLOCKS;
                            assertThat(c.read((long) block * BLOCK, BLOCK))
                                .isEqualTo(Arrays.copyOfRange(expected, block * BLOCK, (block + 1) * BLOCK));
                            doneAt[id] = System.nanoTime() - start;
                        } catch (Throwable t) {
                            failures.put(id, t);
                        } finally {
                            done.countDown();
                        }
                    }));
                }
                boolean inTime = done.await(LIMIT_NANOS - (System.nanoTime() - start), TimeUnit.NANOSECONDS);
                long atLimit = System.nanoTime() - start;
                long servedInTime = Arrays.stream(doneAt).filter(t -> t >= 0 && t <= LIMIT_NANOS).count();
                if (!inTime) done.await(LIMIT_NANOS + GRACE_NANOS - (System.nanoTime() - start), TimeUnit.NANOSECONDS);
                Map<String, Long> after = tcpCounters();

                String report = String.format(
                    "%d simultaneous connects: sent in %.0f ms; %d of %d served within %.0f s; %s; "
                        + "%d failed%s; kernel counters during the test: ListenOverflows +%s, ListenDrops +%s, SyncookiesSent +%s",
                    CLIENTS, connectsSent / 1e6, servedInTime, CLIENTS, LIMIT_NANOS / 1e9,
                    timings(doneAt, inTime ? atLimit : System.nanoTime() - start),
                    failures.size(), failures.isEmpty() ? "" : " " + summarise(failures, stage),
                    delta(before, after, "ListenOverflows"), delta(before, after, "ListenDrops"),
                    delta(before, after, "SyncookiesSent"));
                System.out.println("ManyConnectionsTest: " + report);

                assertThat(servedInTime).as("connections that reached transmission and were served within 10 s of "
                    + "the connects (%s)", report).isEqualTo(CLIENTS);
                assertThat(failures.keySet()).as(report).isEmpty();
            } finally {
                // All stay open until here, so the server held all thousand at once.
                for (SocketChannel ch : channels) {
                    if (ch != null) ch.close();
                }
                for (Thread t : threads) t.join(TimeUnit.SECONDS.toMillis(30));
            }
        }
    }

    /** Failures counted by the stage they happened in and their exception. */
    private static String summarise(Map<Integer, Throwable> failures, String[] stage) {
        Map<String, Long> counts = new java.util.TreeMap<>();
        failures.forEach((id, t) -> counts.merge("in " + stage[id] + ": " + t, 1L, Long::sum));
        return counts.toString();
    }

    /** Median, 99th percentile and slowest of the finished clients, or how many had not finished. */
    private static String timings(long[] doneAt, long waited) {
        long[] finished = Arrays.stream(doneAt).filter(t -> t >= 0).sorted().toArray();
        if (finished.length == 0) return "none finished in " + String.format("%.1f s", waited / 1e9);
        String s = String.format("time to transmission and first read: median %.0f ms, p99 %.0f ms, slowest %.0f ms",
            finished[finished.length / 2] / 1e6, finished[(int) (finished.length * 0.99)] / 1e6,
            finished[finished.length - 1] / 1e6);
        if (finished.length < doneAt.length) {
            s += String.format(" (%d had not, %.1f s after the connects)", doneAt.length - finished.length, waited / 1e9);
        }
        return s;
    }

    /**
     * The kernel's TcpExt counters (as {@code nstat -az TcpExtListenOverflows} shows them): they tell an accept
     * queue overflow from a slow server. Empty where /proc/net/netstat cannot be read.
     */
    private static Map<String, Long> tcpCounters() {
        Map<String, Long> out = new java.util.HashMap<>();
        try {
            List<String> lines = Files.readAllLines(Path.of("/proc/net/netstat"));
            for (int i = 0; i + 1 < lines.size(); i++) {
                if (!lines.get(i).startsWith("TcpExt:") || !lines.get(i + 1).startsWith("TcpExt:")) continue;
                String[] names = lines.get(i).split("\\s+"), values = lines.get(i + 1).split("\\s+");
                for (int k = 1; k < Math.min(names.length, values.length); k++) out.put(names[k], Long.parseLong(values[k]));
                break;
            }
        } catch (IOException | RuntimeException e) {
            // not Linux, or no /proc: the counters are evidence, not part of the assertion
        }
        return out;
    }

    private static String delta(Map<String, Long> before, Map<String, Long> after, String name) {
        Long b = before.get(name), a = after.get(name);
        return a == null || b == null ? "?" : Long.toString(a - b);
    }
}
