package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.client.NbdClient;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code jnbd serve} under socket activation, as a real process: started by {@code systemd-socket-activate} (the
 * systemd package's tool, no running systemd needed), and restarted by a launcher that keeps the socket the way
 * systemd keeps a socket unit's, so that a client connecting while no server runs waits and is then served.
 */
@Timeout(180)
class SocketActivationInteropTest {
    private static final int MiB = 1 << 20;

    @TempDir
    Path dir;
    private final List<Process> started = new ArrayList<>();

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
    }

    @AfterEach
    void tearDown() throws InterruptedException {
        for (Process p : started) {
            p.descendants().forEach(ProcessHandle::destroyForcibly);
            p.destroyForcibly();
            p.waitFor(10, TimeUnit.SECONDS);
        }
    }

    private Process start(List<String> command) throws Exception {
        ProcessBuilder b = new ProcessBuilder(command).directory(dir.toFile())
            .redirectErrorStream(true).redirectOutput(dir.resolve("server.log").toFile());
        b.environment().put("JNBD_NO_BUILD", "1");
        Process p = b.start();
        started.add(p);
        return p;
    }

    private String log() throws Exception {
        return Files.readString(dir.resolve("server.log"));
    }

    @Test
    void servesThroughSystemdSocketActivate() throws Exception {
        Interop.requireCommands("systemd-socket-activate");
        int port = Interop.freePort();
        Path image = dir.resolve("disk.img");
        // systemd-socket-activate binds at once and starts the server at the first connection: that client
        // waits in the queue through the JVM's start, as one does through a restart.
        start(List.of("systemd-socket-activate", "-l", "127.0.0.1:" + port, "-E", "JNBD_NO_BUILD=1", "-E", "PATH",
            Interop.jnbd().toString(), "serve", "--export", "disk=file:" + image + ",size=16M"));
        awaitListening(port);
        byte[] data = filled(MiB, 0x3c);
        try (NbdClient client = NbdClient.connect("nbd://127.0.0.1:" + port + "/disk")) {
            assertThat(client.size()).isEqualTo(16L * MiB);
            client.write(0, ByteBuffer.wrap(data), true).get(60, TimeUnit.SECONDS);
            ByteBuffer back = ByteBuffer.allocate(MiB);
            client.read(0, back).get(60, TimeUnit.SECONDS);
            assertThat(back.array()).isEqualTo(data);
        }
        assertThat(log()).contains("listening on 127.0.0.1:" + port + " (passed by socket activation)");
    }

    @Test
    void aClientConnectingWhileTheServerRestartsWaitsAndIsServed() throws Exception {
        Interop.requireCommands("python3");
        Path portFile = dir.resolve("port");
        Path image = dir.resolve("disk.img");
        ProcessBuilder builder = new ProcessBuilder(List.of("python3", Interop.root().resolve("jnbd-interop/src/test/python/socket_launcher.py").toString(),
                portFile.toString(), Interop.jnbd().toString(), "serve", "--drain-timeout", "10",
                "--export", "disk=file:" + image + ",size=16M"))
            .directory(dir.toFile()).redirectError(dir.resolve("server.log").toFile());
        builder.environment().put("JNBD_NO_BUILD", "1");
        Process launcher = builder.start();
        started.add(launcher);
        PrintWriter control = new PrintWriter(launcher.getOutputStream(), true, StandardCharsets.UTF_8);
        BufferedReader answers = new BufferedReader(new InputStreamReader(launcher.getInputStream(), StandardCharsets.UTF_8));
        while (!Files.exists(portFile)) {
            assertThat(launcher.isAlive()).as("launcher running; log:%n%s", log()).isTrue();
            Thread.sleep(20);
        }
        int port = Integer.parseInt(Files.readString(portFile).strip());
        String uri = "nbd://127.0.0.1:" + port + "/disk";

        control.println("start");
        assertThat(answers.readLine()).startsWith("started ");
        byte[] first = filled(MiB, 0x11);
        try (NbdClient client = NbdClient.connect(uri)) {
            client.write(0, ByteBuffer.wrap(first), false).get(60, TimeUnit.SECONDS);
        }

        control.println("stop");
        assertThat(answers.readLine()).as("the first server drained and exited; log:%n%s", log()).isEqualTo("exited 0");

        // No server runs now: the connection waits in the kept socket's queue, it is not refused.
        CompletableFuture<byte[]> inTheGap = CompletableFuture.supplyAsync(() -> {
            try (NbdClient client = NbdClient.connect(uri)) {
                ByteBuffer b = ByteBuffer.allocate(MiB);
                client.read(0, b).get(60, TimeUnit.SECONDS);
                return b.array();
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
        Thread.sleep(500);
        assertThat(inTheGap).as("a client in the gap is waiting, neither refused nor served").isNotDone();

        control.println("start");
        assertThat(answers.readLine()).startsWith("started ");
        assertThat(inTheGap.get(90, TimeUnit.SECONDS)).as("served by the second server, the first one's write").isEqualTo(first);

        control.println("quit");
        assertThat(launcher.waitFor(60, TimeUnit.SECONDS)).isTrue();
        assertThat(log()).contains("(passed by socket activation, nbd)");
    }

    private static void awaitListening(int port) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!Interop.accepts(port)) {
            assertThat(System.nanoTime()).as("systemd-socket-activate listens").isLessThan(deadline);
            Thread.sleep(20);
        }
    }

    private static byte[] filled(int size, int value) {
        byte[] b = new byte[size];
        Arrays.fill(b, (byte) value);
        return b;
    }
}
