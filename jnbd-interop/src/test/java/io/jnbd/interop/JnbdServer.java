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
 * {@code bin/jnbd serve} (or {@code bin/jnbd memserver}) running as its own process on a free loopback port,
 * the way a user runs it. Its output goes to {@code server.log} in the working directory; {@link #stop()}
 * sends SIGTERM.
 */
final class JnbdServer implements AutoCloseable {

    private static final Duration START_TIMEOUT = Duration.ofSeconds(60);
    /** What {@code serve} prints once every listener is up. */
    private static final String SERVE_BANNER = "Connect with";
    /** What {@code memserver} prints once it listens. */
    private static final String MEMSERVER_BANNER = "jnbd memserver:";

    private final Process process;
    private final int port;
    private final Path workDir;
    private final Path log;
    private volatile boolean suspended;

    private JnbdServer(Process process, int port, Path workDir, Path log) {
        this.process = process;
        this.port = port;
        this.workDir = workDir;
        this.log = log;
    }

    /** Starts {@code bin/jnbd serve --listen 127.0.0.1:PORT ARGS...} in workDir and waits until the port accepts. */
    static JnbdServer start(Path workDir, String... args) throws IOException, InterruptedException {
        return startOnFreePort(workDir, "serve", SERVE_BANNER, args);
    }

    /**
     * As {@link #start(Path, String...)}, but returns as soon as the port accepts, without waiting for
     * the banner: for tests of what happens in the moment right after the server starts listening.
     */
    static JnbdServer startUntilAccepting(Path workDir, String... args) throws IOException, InterruptedException {
        return startOnFreePort(workDir, "serve", null, args);
    }

    /**
     * Starts {@code bin/jnbd memserver --listen 127.0.0.1:PORT ARGS...} (a memory server of a pool) in workDir
     * on a free port and waits until it listens.
     */
    static JnbdServer memserver(Path workDir, String... args) throws IOException, InterruptedException {
        return startOnFreePort(workDir, "memserver", MEMSERVER_BANNER, args);
    }

    /**
     * As {@link #memserver(Path, String...)}, on a given port: a memory server restarted at the address of one
     * that died. Its output is appended to the same {@code server.log} when workDir is the same.
     */
    static JnbdServer memserverOn(Path workDir, int port, String... args) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>(List.of(Interop.jnbd().toString(), "memserver",
            "--listen", "127.0.0.1:" + port));
        command.addAll(List.of(args));
        return start(workDir, port, command, MEMSERVER_BANNER);
    }

    /** Starts {@code bin/jnbd SUBCOMMAND --listen 127.0.0.1:PORT ARGS...}; waits for the banner unless it is null. */
    private static JnbdServer startOnFreePort(Path workDir, String subcommand, String banner, String... args)
            throws IOException, InterruptedException {
        IOException last = null;
        for (int attempt = 0; attempt < 3; attempt++) {
            int port = Interop.freePort();
            List<String> command = new ArrayList<>(List.of(Interop.jnbd().toString(), subcommand,
                "--listen", "127.0.0.1:" + port));
            command.addAll(List.of(args));
            try {
                return start(workDir, port, command, banner);
            } catch (PortTakenException e) {
                last = e; // someone took the free port between our probe and the bind: try another
            }
        }
        throw last;
    }

    /** Starts exactly this command line (no --listen added) and waits until {@code port} accepts. */
    static JnbdServer start(Path workDir, int port, List<String> command) throws IOException, InterruptedException {
        return start(workDir, port, command, SERVE_BANNER);
    }

    private static JnbdServer start(Path workDir, int port, List<String> command, String banner)
            throws IOException, InterruptedException {
        Files.createDirectories(workDir);
        Path log = workDir.resolve("server.log");
        int logStart = Files.exists(log) ? Files.readString(log).length() : 0;
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
                String output = server.log().substring(logStart);
                if (output.toLowerCase().contains("in use")) throw new PortTakenException(output);
                fail("%s exited with %d before listening on port %d:%n%s",
                    String.join(" ", command), process.exitValue(), port, output);
            }
            if (System.nanoTime() > deadline) {
                server.kill();
                fail("%s did not listen on port %d within %s:%n%s", String.join(" ", command), port,
                    START_TIMEOUT, server.log());
            }
            Thread.sleep(banner != null ? 100 : 10);
        }
        // The banner is printed once every listener is up; the port may accept a moment before it is written.
        // A restarted server appends to the log of the one before: only what this process wrote counts.
        while (banner != null && !server.log().substring(logStart).contains(banner) && process.isAlive()
            && System.nanoTime() < deadline) {
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
        if (suspended) resume(); // a stopped process would hold SIGTERM until the timeout
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

    /**
     * SIGSTOP to the server's pid: it hangs, with its sockets open, as a server that stopped answering.
     * {@link #resume()} (SIGCONT) undoes it; {@link #kill()} ends it stopped or not.
     */
    void suspend() {
        suspended = true;
        signal("STOP");
    }

    /** SIGCONT: a server stopped by {@link #suspend()} runs again. */
    void resume() {
        if (process.isAlive()) signal("CONT");
        suspended = false;
    }

    boolean suspended() {
        return suspended;
    }

    /** SIGHUP: jnbd serve reads its --config file again. */
    void hangUp() {
        signal("HUP");
    }

    private void signal(String name) {
        Interop.run(Duration.ofSeconds(10), workDir, "kill", "-" + name, Long.toString(process.pid())).assertSuccess();
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
