package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

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

    /**
     * Writes take two seconds each in the export (filter=delay), so that writes sent once the drain has begun
     * certainly reach a connection still open for the writes it had read before. Those it had read are answered
     * (as many as the drain's line says), the others are refused with ESHUTDOWN, and nothing else happens to any.
     */
    @Test
    void aClientWritingThroughSigtermGetsEveryWriteAnsweredAndEshutdownAfterTheDrainBegan() throws Exception {
        Path image = dir.resolve("disk.img");
        server = JnbdServer.start(dir, "--drain-timeout", "20",
            "--export", "disk=file:" + image + ",size=16M,filter=delay,delay-write=2s");
        List<Integer> acknowledged = new ArrayList<>();
        List<Integer> refused = new ArrayList<>();
        List<CompletableFuture<Void>> beforeSignal = new ArrayList<>();
        List<CompletableFuture<Void>> afterSignal = new ArrayList<>();
        try (NbdClient client = NbdClient.connect(server.uri("disk"))) {
            // Eight FUA writes in flight, as a busy VM keeps them, each sent as soon as an earlier one is answered.
            int next = 0;
            for (; next < 8; next++) beforeSignal.add(write(client, next));
            while (acknowledged.size() < 8) {
                beforeSignal.get(acknowledged.size()).get(60, TimeUnit.SECONDS);
                acknowledged.add(acknowledged.size());
                beforeSignal.add(write(client, next++));
            }
            sigterm();
            awaitLog("drain: 1 connection with ");
            for (int i = 0; i < 4; i++) afterSignal.add(write(client, next++));

            // Sent before the signal: answered if the server had read it when the drain began, else refused.
            for (int i = 8; i < beforeSignal.size(); i++) {
                try {
                    beforeSignal.get(i).get(60, TimeUnit.SECONDS);
                    acknowledged.add(i);
                } catch (ExecutionException e) {
                    assertThat(e.getCause()).isInstanceOfSatisfying(NbdErrorException.class, n -> assertThat(n.error()).isEqualTo(Nbd.ESHUTDOWN));
                    refused.add(i);
                }
            }
            for (int i = 0; i < afterSignal.size(); i++) {
                CompletableFuture<Void> f = afterSignal.get(i);
                assertThatThrownBy(() -> f.get(60, TimeUnit.SECONDS)).as("a write sent after the drain began")
                    .cause().isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.ESHUTDOWN));
                refused.add(beforeSignal.size() + i);
            }
        }
        assertThat(server.process().waitFor(30, TimeUnit.SECONDS)).as("exited within the drain timeout; log:%n%s", server.log()).isTrue();
        assertThat(server.process().exitValue()).isZero();
        for (int block : acknowledged) {
            assertThat(Interop.readAt(image, (long) block * BLOCK, BLOCK)).as("acknowledged write %d", block).containsOnly((byte) (block + 1));
        }
        for (int block : refused) {
            assertThat(Interop.readAt(image, (long) block * BLOCK, BLOCK)).as("refused write %d never reached the file", block).containsOnly((byte) 0);
        }
        java.util.regex.Matcher m = java.util.regex.Pattern
            .compile("drain: 1 connection, (\\d+) requests? answered, (\\d+) refused with ESHUTDOWN, exports flushed, in ").matcher(server.log());
        assertThat(m.find()).as("the drain's line; log:%n%s", server.log()).isTrue();
        assertThat(Integer.parseInt(m.group(1))).as("the writes in flight when the drain began, all answered").isEqualTo(acknowledged.size() - 8).isPositive();
        assertThat(Integer.parseInt(m.group(2))).isEqualTo(refused.size());
        System.out.printf("drain: %d writes acknowledged, %d refused with ESHUTDOWN%n", acknowledged.size(), refused.size());
    }

    private static CompletableFuture<Void> write(NbdClient client, int block) {
        return client.write((long) block * BLOCK, ByteBuffer.wrap(filled(BLOCK, block + 1)), true);
    }

    private void awaitLog(String text) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!server.log().contains(text)) {
            assertThat(System.nanoTime()).as("'%s' in the log:%n%s", text, server.log()).isLessThan(deadline);
            Thread.sleep(10);
        }
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
