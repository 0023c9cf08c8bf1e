package io.jnbd.tls;

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

/** A GnuTLS program (nbdkit, gnutls-cli) run by a test, its output kept for the failure message; killed on close. */
final class ExternalPeer implements AutoCloseable {
    final Process process;
    private final Path log;

    private ExternalPeer(Process process, Path log) {
        this.process = process;
        this.log = log;
    }

    static boolean onPath(String binary) {
        for (String dir : System.getenv().getOrDefault("PATH", "").split(File.pathSeparator)) {
            if (Files.isExecutable(Path.of(dir, binary))) return true;
        }
        return false;
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    static ExternalPeer start(List<String> command) throws IOException {
        Path log = Files.createTempFile("jnbd-tls-peer", ".log");
        Process p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        return new ExternalPeer(p, log);
    }

    /** nbdkit in the foreground on 127.0.0.1:{@code port}, once it accepts connections. */
    static ExternalPeer nbdkit(int port, String... args) throws IOException, InterruptedException {
        List<String> cmd = new java.util.ArrayList<>(List.of("nbdkit", "-f", "--exit-with-parent", "-i", "127.0.0.1",
            "-p", String.valueOf(port)));
        cmd.addAll(List.of(args));
        ExternalPeer peer = start(cmd);
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (System.nanoTime() < until) {
            if (!peer.process.isAlive()) {
                String out = peer.output();
                peer.close();
                throw new IOException("nbdkit exited: " + out);
            }
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 200);
                return peer;
            } catch (IOException notYet) {
                Thread.sleep(50);
            }
        }
        peer.close();
        throw new IOException("nbdkit did not listen on port " + port + " within 15 s");
    }

    String output() {
        try {
            return Files.readString(log);
        } catch (IOException e) {
            return "(no output: " + e + ")";
        }
    }

    boolean awaitExit(long seconds) throws InterruptedException {
        return process.waitFor(seconds, TimeUnit.SECONDS);
    }

    @Override
    public void close() {
        process.destroy();
        try {
            if (!process.waitFor(5, TimeUnit.SECONDS)) process.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
        }
        try {
            Files.deleteIfExists(log);
        } catch (IOException ignored) {
            // a leftover log in the temp directory is harmless
        }
    }
}
