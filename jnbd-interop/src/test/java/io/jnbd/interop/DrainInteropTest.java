package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdErrorException;
import io.jnbd.protocol.Nbd;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The drain of {@code jnbd serve} at SIGTERM, as a real process signalled by its pid: a client that keeps writing
 * through the signal sees every write answered, those after the drain began with ESHUTDOWN, and finds every
 * acknowledged one in the file; a client stuck in the middle of a payload holds the exit only until
 * --drain-timeout, or until a second SIGTERM.
 */
@Timeout(180)
class DrainInteropTest {
    private static final int BLOCK = 64 * 1024;

    @TempDir
    Path dir;
    JnbdServer server;

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
    }

    @AfterEach
    void tearDown() throws InterruptedException {
        if (server != null) server.kill();
    }

    private void sigterm() throws Exception {
        Interop.run(java.time.Duration.ofSeconds(10), dir, "kill", "-TERM", Long.toString(server.pid())).assertSuccess();
    }

    @Test
    void aClientWritingThroughSigtermGetsEveryWriteAnsweredAndEshutdownAfterTheDrainBegan() throws Exception {
        Path image = dir.resolve("disk.img");
        int blocks = 4096; // 256 MiB of offsets; the client stops at the first ESHUTDOWN
        server = JnbdServer.start(dir, "--drain-timeout", "20", "--export", "disk=file:" + image + ",size=" + (blocks * (long) BLOCK));
        List<Integer> acknowledged = new ArrayList<>();
        List<Integer> refused = new ArrayList<>();
        List<Throwable> other = new ArrayList<>();
        try (NbdClient client = NbdClient.connect(server.uri("disk"))) {
            List<CompletableFuture<Void>> window = new ArrayList<>();
            int next = 0;
            boolean signalled = false;
            long sentAtSignal = -1;
            // Eight writes in flight at all times, as a busy VM keeps them, until the server refuses one.
            while (next < blocks && refused.isEmpty()) {
                while (window.size() < 8 && next < blocks) {
                    window.add(client.write((long) next * BLOCK, ByteBuffer.wrap(filled(BLOCK, next)), false));
                    next++;
                }
                CompletableFuture<Void> oldest = window.removeFirst();
                int block = next - window.size() - 1;
                try {
                    oldest.get(60, TimeUnit.SECONDS);
                    acknowledged.add(block);
                } catch (ExecutionException e) {
                    if (e.getCause() instanceof NbdErrorException n && n.error() == Nbd.ESHUTDOWN) refused.add(block);
                    else other.add(e.getCause());
                }
                if (!signalled && acknowledged.size() == 64) {
                    sigterm();
                    signalled = true;
                    sentAtSignal = next;
                }
            }
            for (int i = 0; i < window.size(); i++) {
                int block = next - window.size() + i;
                try {
                    window.get(i).get(60, TimeUnit.SECONDS);
                    acknowledged.add(block);
                } catch (ExecutionException e) {
                    if (e.getCause() instanceof NbdErrorException n && n.error() == Nbd.ESHUTDOWN) refused.add(block);
                    // else: the server closed once it had answered what it read; this one was never read
                }
            }
            assertThat(signalled).isTrue();
            assertThat(other).as("no write failed but with ESHUTDOWN").isEmpty();
            assertThat(refused).as("writes sent after the drain began were refused with ESHUTDOWN").isNotEmpty();
            assertThat(acknowledged).as("every write sent before the signal").containsAll(
                java.util.stream.IntStream.range(0, 64).boxed().toList());
        }
        assertThat(server.process().waitFor(30, TimeUnit.SECONDS)).as("exited within the drain timeout; log:%n%s", server.log()).isTrue();
        assertThat(server.process().exitValue()).isZero();
        for (int block : acknowledged) {
            assertThat(Interop.readAt(image, (long) block * BLOCK, BLOCK)).as("acknowledged write %d", block).containsOnly((byte) block);
        }
        for (int block : refused) {
            assertThat(Interop.readAt(image, (long) block * BLOCK, BLOCK)).as("refused write %d never reached the file", block).containsOnly((byte) 0);
        }
        assertThat(server.log()).containsPattern("drain: 1 connection, \\d+ requests? answered, [1-9]\\d* refused with ESHUTDOWN, exports flushed, in \\d+ ms");
        System.out.printf("drain: %d writes acknowledged, %d refused with ESHUTDOWN%n", acknowledged.size(), refused.size());
    }

    @Test
    void aClientStuckMidPayloadHoldsTheExitOnlyUntilTheDrainTimeout() throws Exception {
        server = JnbdServer.start(dir, "--drain-timeout", "2", "--export", "mem=memory:16M");
        try (RawNbdClient stuck = RawNbdClient.open(server.port(), "mem")) {
            stuck.send(RawNbdClient.CMD_WRITE, 1, 0, 1 << 20, null); // a header, and none of its payload
            Thread.sleep(200); // let the server read the header: the write is then one the drain waits for
            long start = System.nanoTime();
            sigterm();
            assertThat(server.process().waitFor(30, TimeUnit.SECONDS)).as("exited; log:%n%s", server.log()).isTrue();
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertThat(server.process().exitValue()).isZero();
            assertThat(ms).as("the drain waited for its timeout").isGreaterThanOrEqualTo(2000);
            assertThat(server.log()).contains("drain timed out after 2000 ms: 1 connection, 0 requests answered")
                .contains("1 connection closed with requests still in flight");
        }
    }

    @Test
    void aSecondSigtermEndsTheDrainAtOnce() throws Exception {
        server = JnbdServer.start(dir, "--drain-timeout", "600", "--export", "mem=memory:16M");
        try (RawNbdClient stuck = RawNbdClient.open(server.port(), "mem")) {
            stuck.send(RawNbdClient.CMD_WRITE, 1, 0, 1 << 20, null);
            Thread.sleep(200);
            sigterm();
            Thread.sleep(500);
            assertThat(server.process().isAlive()).as("still draining after the first SIGTERM").isTrue();
            sigterm();
            assertThat(server.process().waitFor(30, TimeUnit.SECONDS)).as("exited after the second SIGTERM; log:%n%s", server.log()).isTrue();
            assertThat(server.process().exitValue()).isZero();
            assertThat(server.log()).contains("SIGTERM again: ending the drain now").contains("drain cut short by a second signal");
        }
    }

    private static byte[] filled(int size, int value) {
        byte[] b = new byte[size];
        Arrays.fill(b, (byte) value);
        return b;
    }
}
