package io.jnbd.client;

import java.io.File;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A real NBD server run as a subprocess on loopback for interop tests. Interop tests run only when the
 * system property {@code jnbd.interop} is {@code true} (bin/test sets it) and the peer binary is installed,
 * so that a developer without the peers still gets a green unit run. Shared with the CLI's tests
 * through this module's test jar.
 */
public final class Peer implements AutoCloseable {
    private final ProcessHandle process;
    private final Path log;
    public final int port;

    private Peer(ProcessHandle process, Path log, int port) {
        this.process = process;
        this.log = log;
        this.port = port;
    }

    public static void assumeInterop(String binary) {
        assumeTrue("true".equals(System.getProperty("jnbd.interop")),
            "interop tests are off: run with -Djnbd.interop=true (bin/test does)");
        assumeTrue(onPath(binary), binary + " is not installed; skipping tests that need it");
    }

    public static boolean onPath(String binary) {
        for (String dir : System.getenv().getOrDefault("PATH", "").split(File.pathSeparator)) {
            if (Files.isExecutable(Path.of(dir, binary))) return true;
        }
        return false;
    }

    public static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    /** Starts {@code command} (which must listen on {@code port} of 127.0.0.1) and waits until it accepts. */
    public static Peer start(int port, List<String> command) throws IOException, InterruptedException {
        Path log = Files.createTempFile("jnbd-peer", ".log");
        Process p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        Peer peer = new Peer(p.toHandle(), log, port);
        return awaitPort(peer, p, port, command);
    }

    /**
     * Starts a server that forks into the background (nbd-server: in the foreground it serves only one client
     * and exits when a readiness probe connects), following it by the PID file it writes.
     */
    public static Peer startDaemon(int port, Path pidFile, List<String> command) throws IOException, InterruptedException {
        Path log = Files.createTempFile("jnbd-peer", ".log");
        Process launcher = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        if (!launcher.waitFor(15, TimeUnit.SECONDS) || launcher.exitValue() != 0) {
            launcher.destroyForcibly();
            throw new IOException(command + " failed: " + Files.readString(log));
        }
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (System.nanoTime() < until && (!Files.exists(pidFile) || Files.readString(pidFile).isBlank())) Thread.sleep(20);
        long pid = Long.parseLong(Files.readString(pidFile).trim());
        ProcessHandle daemon = ProcessHandle.of(pid).orElseThrow(() -> new IOException(command + " exited"));
        return awaitPort(new Peer(daemon, log, port), null, port, command);
    }

    private static Peer awaitPort(Peer peer, Process p, int port, List<String> command) throws IOException, InterruptedException {
        Path log = peer.log;
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (System.nanoTime() < until) {
            if (!peer.process.isAlive()) {
                String out = Files.readString(log);
                peer.close();
                throw new IOException(command.getFirst() + " exited: " + out);
            }
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 200);
                return peer;
            } catch (IOException notYet) {
                Thread.sleep(50);
            }
        }
        peer.close();
        throw new IOException(command + " did not listen on port " + port + " within 15 s");
    }

    /** Waits for a Unix socket peer to create its socket. */
    public static Peer startUnix(Path socket, List<String> command) throws IOException, InterruptedException {
        Path log = Files.createTempFile("jnbd-peer", ".log");
        Process p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        Peer peer = new Peer(p.toHandle(), log, -1);
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        // The file appears at bind(); a connect before the peer's listen() is refused.
        while (System.nanoTime() < until && !listening(socket)) Thread.sleep(50);
        if (!listening(socket)) {
            peer.close();
            throw new IOException(command + " did not listen on " + socket);
        }
        return peer;
    }

    /** Whether a Unix socket is listening at {@code path}: /proc/net/unix flags it __SO_ACCEPTCON (00010000). */
    static boolean listening(Path path) throws IOException {
        String name = path.toAbsolutePath().toString();
        for (String line : Files.readAllLines(Path.of("/proc/net/unix"))) {
            String[] f = line.trim().split("\\s+");
            // Num RefCount Protocol Flags Type St Inode Path
            if (f.length >= 8 && f[7].equals(name) && f[3].equals("00010000")) return true;
        }
        return false;
    }

    public String uri(String export) {
        return "nbd://127.0.0.1:" + port + "/" + export;
    }

    public boolean alive() {
        return process.isAlive();
    }

    /** Kills the peer at once, as a crash would. */
    public void kill() throws InterruptedException {
        process.descendants().forEach(ProcessHandle::destroyForcibly);
        process.destroyForcibly();
        awaitExit(10);
    }

    private boolean awaitExit(int seconds) throws InterruptedException {
        try {
            process.onExit().get(seconds, TimeUnit.SECONDS);
            return true;
        } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
            return !process.isAlive();
        }
    }

    @Override
    public void close() {
        process.descendants().forEach(ProcessHandle::destroy);
        process.destroy();
        try {
            if (!awaitExit(5)) kill();
        } catch (InterruptedException e) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
        }
        try {
            Files.deleteIfExists(log);
        } catch (IOException ignored) {
            // A leftover log in /tmp is harmless.
        }
    }

    /** nbdkit in the foreground on loopback, dying with the JVM if the JVM dies first. */
    public static List<String> nbdkit(int port, String... args) {
        var cmd = new java.util.ArrayList<>(List.of("nbdkit", "-f", "--exit-with-parent", "-i", "127.0.0.1", "-p",
            String.valueOf(port)));
        cmd.addAll(List.of(args));
        return cmd;
    }
}
