package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * SIGTERM (and SIGINT) with clients connected, idle and busy: the server stops accepting, finishes what
 * is in flight, flushes and exits 0, and every write it acknowledged is in the backing file.
 */
@Timeout(180)
class SigtermInteropTest {

    private static final Duration T = Duration.ofSeconds(60);
    private static final int MiB = 1 << 20;

    @TempDir
    Path dir;
    JnbdServer server;
    Process qemuIo;

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
        Interop.requireCommands("qemu-io");
    }

    @AfterEach
    void tearDown() throws Exception {
        if (qemuIo != null) qemuIo.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
        if (server != null) server.kill();
    }

    @Test
    void sigtermWithClientsConnectedExitsZeroAndKeepsAcknowledgedWrites() throws Exception {
        Path image = dir.resolve("disk.img");
        server = JnbdServer.start(dir, "--export", "disk=file:" + image + ",size=64M");

        // A client that wrote, was acknowledged, and went away.
        Interop.run(T, dir, "qemu-io", "-f", "raw", server.uri("disk"), "-c", "write -P 0x5a 0 1M").assertSuccess();

        try (RawNbdClient acked = RawNbdClient.open(server.port(), "disk");
             RawNbdClient inHandshake = RawNbdClient.connectOnly(server.port());
             RawNbdClient busy = RawNbdClient.open(server.port(), "disk")) {
            // A client whose write was acknowledged, with no FLUSH, still connected.
            byte[] a5 = filled(MiB, 0xa5);
            assertThat(acked.write(MiB, a5)).as("NBD error of the acknowledged write").isZero();

            // A client that stays idle inside qemu-io.
            qemuIo = new ProcessBuilder("qemu-io", "-f", "raw", server.uri("disk"))
                .redirectErrorStream(true)
                .redirectOutput(dir.resolve("qemu-io.log").toFile())
                .start();
            Thread.sleep(1000); // let qemu-io connect

            // A client with many writes in flight when the signal arrives (32 MiB, sent as fast as the server takes them).
            int count = 128;
            int size = 256 * 1024;
            long base = 8L * MiB;
            List<Long> acknowledged = new CopyOnWriteArrayList<>();
            List<Long> refused = new CopyOnWriteArrayList<>();
            CountDownLatch someAcknowledged = new CountDownLatch(4);
            Thread reader = Thread.ofPlatform().start(() -> {
                try {
                    for (int i = 0; i < count; i++) {
                        RawNbdClient.Reply reply = busy.readReply();
                        (reply.error() == 0 ? acknowledged : refused).add(reply.cookie());
                        someAcknowledged.countDown();
                    }
                } catch (IOException closed) {
                    // the server closed the connection after the signal: fine, unacknowledged writes may be lost
                } finally {
                    while (someAcknowledged.getCount() > 0) someAcknowledged.countDown();
                }
            });
            Thread writer = Thread.ofPlatform().start(() -> {
                try {
                    for (int i = 0; i < count; i++) {
                        busy.send(RawNbdClient.CMD_WRITE, i, base + (long) i * size, size, filled(size, i + 1));
                    }
                } catch (IOException closed) {
                    // the server stopped reading: expected once it is shutting down
                }
            });
            assertThat(someAcknowledged.await(30, TimeUnit.SECONDS)).isTrue();

            server.process().destroy(); // SIGTERM
            boolean exited = server.process().waitFor(30, TimeUnit.SECONDS);
            assertThat(exited).as("server exited within 30 s of SIGTERM; log:%n%s", server.log()).isTrue();
            assertThat(server.process().exitValue()).as("exit status after SIGTERM; log:%n%s", server.log()).isZero();
            reader.join(10_000);
            writer.join(10_000);

            assertThat(Interop.readAt(image, 0, MiB)).as("qemu-io's write").containsOnly((byte) 0x5a);
            assertThat(Interop.readAt(image, MiB, MiB)).as("the acknowledged, unflushed write").isEqualTo(a5);
            assertThat(acknowledged).as("writes acknowledged before shutdown").isNotEmpty();
            for (long cookie : acknowledged) {
                byte[] data = Interop.readAt(image, base + cookie * size, size);
                assertThat(data).as("acknowledged write %d", cookie).containsOnly((byte) (cookie + 1));
            }
            System.out.printf("SIGTERM: %d writes acknowledged, %d refused, %d unanswered%n",
                acknowledged.size(), refused.size(), count - acknowledged.size() - refused.size());
        }
    }

    @Test
    void sigintExitsZero() throws Exception {
        server = JnbdServer.start(dir, "--export", "mem=memory:16M");
        try (RawNbdClient client = RawNbdClient.open(server.port(), "mem")) {
            assertThat(client.exportSize).isEqualTo(16L * MiB);
            assertThat(client.write(0, filled(4096, 7))).isZero();
            Interop.run(T, dir, "kill", "-INT", Long.toString(server.process().pid())).assertSuccess();
            assertThat(server.process().waitFor(30, TimeUnit.SECONDS)).as("exited after SIGINT").isTrue();
            assertThat(server.process().exitValue()).as("exit status after SIGINT; log:%n%s", server.log()).isZero();
        }
    }

    /**
     * A supervisor may stop the server the moment it is up: SIGTERM as soon as the port accepts must
     * still mean exit 0 (the handlers must be in place before the server listens). Several rounds,
     * because the window is short.
     */
    @Test
    void sigtermRightAfterStartExitsZero() throws Exception {
        for (int round = 1; round <= 10; round++) {
            Path work = java.nio.file.Files.createDirectories(dir.resolve("round" + round));
            // Only until the port accepts, on purpose: the signal must be handled from that moment on.
            server = JnbdServer.startUntilAccepting(work, "--export", "mem=memory:1M");
            int status = server.stop();
            assertThat(status).as("round %d: exit status after SIGTERM right after start; log:%n%s", round, server.log())
                .isZero();
            assertThat(Interop.accepts(server.port())).as("port still accepting after exit").isFalse();
        }
    }

    private static byte[] filled(int size, int value) {
        byte[] data = new byte[size];
        Arrays.fill(data, (byte) value);
        return data;
    }
}
