package io.jnbd.interop;

import static org.assertj.core.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;
import java.util.concurrent.TimeUnit;

/**
 * {@code bin/jnbd serve} running as its own process on a free loopback port, the way a user runs it.
 * Its output goes to {@code server.log} in the working directory; {@link #stop()} sends SIGTERM.
 */
final class JnbdServer implements AutoCloseable {

    private static final Duration START_TIMEOUT = Duration.ofSeconds(60);

    private final Process process;
    private final int port;
    private final Path workDir;
    private final Path log;

    private JnbdServer(Process process, int port, Path workDir, Path log) {
        this.process = process;
        this.port = port;
        this.workDir = workDir;
        this.log = log;
    }

    /** Starts {@code bin/jnbd serve --listen 127.0.0.1:PORT ARGS...} in workDir and waits until the port accepts. */
    static JnbdServer start(Path workDir, String... args) throws IOException, InterruptedException {
        return startOnFreePort(workDir, true, args);
    }

    /**
     * As {@link #start(Path, String...)}, but returns as soon as the port accepts, without waiting for
     * the banner: for tests of what happens in the moment right after the server starts listening.
     */
    static JnbdServer startUntilAccepting(Path workDir, String... args) throws IOException, InterruptedException {
        return startOnFreePort(workDir, false, args);
    }

    private static JnbdServer startOnFreePort(Path workDir, boolean waitForBanner, String... args)
            throws IOException, InterruptedException {
        IOException last = null;
        for (int attempt = 0; attempt < 3; attempt++) {
            int port = Interop.freePort();
            List<String> command = new ArrayList<>(List.of(Interop.jnbd().toString(), "serve",
                "--listen", "127.0.0.1:" + port));
            command.addAll(List.of(args));
            try {
                return start(workDir, port, command, waitForBanner);
            } catch (PortTakenException e) {
                last = e; // someone took the free port between our probe and the bind: try another
            }
        }
        throw last;
    }

    /** Starts exactly this command line (no --listen added) and waits until {@code port} accepts. */
    static JnbdServer start(Path workDir, int port, List<String> command) throws IOException, InterruptedException {
        return start(workDir, port, command, true);
    }

    private static JnbdServer start(Path workDir, int port, List<String> command, boolean waitForBanner)
            throws IOException, InterruptedException {
        Files.createDirectories(workDir);
        Path log = workDir.resolve("server.log");
        ProcessBuilder builder = new ProcessBuilder(command)
            .directory(workDir.toFile())
            .redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()))
            .redirectInput(ProcessBuilder.Redirect.PIPE);
        builder.environment().put("JNBD_NO_BUILD", "1");
        Process process = builder.start();
        JnbdServer server = new JnbdServer(process, port, workDir, log);
        long deadline = System.nanoTime() + START_TIMEOUT.toNanos();
        while (!Interop.accepts(port)) {
            if (!process.isAlive()) {
                String output = server.log();
                if (output.toLowerCase().contains("in use")) throw new PortTakenException(output);
                fail("%s exited with %d before listening on port %d:%n%s",
                    String.join(" ", command), process.exitValue(), port, output);
            }
            if (System.nanoTime() > deadline) {
                server.kill();
                fail("%s did not listen on port %d within %s:%n%s", String.join(" ", command), port,
                    START_TIMEOUT, server.log());
            }
            Thread.sleep(waitForBanner ? 100 : 10);
        }
        // The banner is printed once every listener is up; the port may accept a moment before it is written.
        while (waitForBanner && !server.log().contains("Connect with") && process.isAlive() && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        return server;
    }

    int port() {
        return port;
    }

    Path workDir() {
        return workDir;
    }

    Process process() {
        return process;
    }

    /** nbd://127.0.0.1:PORT/NAME */
    String uri(String export) {
        return "nbd://127.0.0.1:" + port + "/" + export;
    }

    String log() {
        try {
            return Files.exists(log) ? Files.readString(log) : "";
        } catch (IOException e) {
            return "(cannot read " + log + ": " + e + ")";
        }
    }

    /** Sends SIGTERM and waits for the exit; returns the exit status (-1 if it had to be killed). */
    int stop() throws InterruptedException {
        if (!process.isAlive()) return process.exitValue();
        process.destroy();
        if (process.waitFor(30, TimeUnit.SECONDS)) return process.exitValue();
        kill();
        return -1;
    }

    long pid() {
        return process.pid();
    }

    /**
     * SIGKILL to the server's pid, without waiting: a crash, so no shutdown hook runs and nothing is
     * flushed on the way out. bin/jnbd execs the JVM, so the pid is the server itself, and
     * destroyForcibly is kill(pid, SIGKILL) on Linux. Wait with {@link #awaitExit(Duration)}.
     */
    void kill9() {
        process.destroyForcibly();
    }

    /** Waits up to {@code timeout} for the process to end; its exit status, or empty if it is still running. */
    OptionalInt awaitExit(Duration timeout) throws InterruptedException {
        return process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)
            ? OptionalInt.of(process.exitValue())
            : OptionalInt.empty();
    }

    void kill() throws InterruptedException {
        process.destroyForcibly();
        process.waitFor(10, TimeUnit.SECONDS);
    }

    @Override
    public void close() throws InterruptedException {
        stop();
    }

    private static final class PortTakenException extends IOException {
        PortTakenException(String message) {
            super(message);
        }
    }
}
