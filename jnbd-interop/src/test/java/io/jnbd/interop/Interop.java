package io.jnbd.interop;

import static org.assertj.core.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;

/** What every interop test needs: the switch, the peers, the repository and running commands. */
final class Interop {

    private Interop() {}

    /** Skips the caller unless {@code -Djnbd.interop=true} (bin/test sets it). */
    static void requireEnabled() {
        assumeTrue("true".equals(System.getProperty("jnbd.interop")),
            "interop tests are off: run bin/test, or mvn verify -Djnbd.interop=true");
    }

    /** Skips the caller when a peer program is not installed, naming it. */
    static void requireCommands(String... commands) {
        for (String command : commands) {
            assumeTrue(which(command) != null,
                command + " is not installed (bin/test installs it when run as root): skipping");
        }
    }

    /** The absolute path of a program on PATH (plus the sbin directories), or null. */
    static Path which(String command) {
        String path = System.getenv().getOrDefault("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin";
        for (String dir : path.split(File.pathSeparator)) {
            if (dir.isEmpty()) continue;
            Path candidate = Path.of(dir, command);
            if (Files.isExecutable(candidate)) return candidate;
        }
        return null;
    }

    /** The repository root: -Djnbd.root when it holds bin/jnbd, else the nearest parent of the working dir that does. */
    static Path root() {
        String property = System.getProperty("jnbd.root");
        if (property != null && Files.isExecutable(Path.of(property, "bin", "jnbd"))) {
            return Path.of(property).toAbsolutePath();
        }
        for (Path dir = Path.of("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
            if (Files.isExecutable(dir.resolve("bin/jnbd"))) return dir;
        }
        throw new IllegalStateException("cannot find bin/jnbd above " + Path.of("").toAbsolutePath());
    }

    static Path jnbd() {
        return root().resolve("bin/jnbd");
    }

    static boolean isRoot() {
        try {
            return run(Duration.ofSeconds(10), null, "id", "-u").output().strip().equals("0");
        } catch (RuntimeException e) {
            return false;
        }
    }

    /** A loopback port nobody listens on right now. */
    static int freePort() {
        try (ServerSocket socket = new ServerSocket()) {
            socket.setReuseAddress(false);
            socket.bind(new InetSocketAddress("127.0.0.1", 0));
            return socket.getLocalPort();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static boolean accepts(int port) {
        try (Socket socket = new Socket()) {
            socket.connect(new InetSocketAddress("127.0.0.1", port), 200);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** The outcome of a finished command: exit status and stdout and stderr interleaved. */
    record Result(List<String> command, int exitCode, String output) {
        Result assertSuccess() {
            if (exitCode != 0) {
                fail("%s exited with %d:%n%s", String.join(" ", command), exitCode, output);
            }
            return this;
        }

        @Override
        public String toString() {
            return String.join(" ", command) + " -> exit " + exitCode + "\n" + output;
        }
    }

    static Result run(Duration timeout, Path cwd, String... command) {
        return run(timeout, cwd, List.of(command));
    }

    /** Runs a command to completion, killing it (and failing) when it outlives the timeout. */
    static Result run(Duration timeout, Path cwd, List<String> command) {
        Path log = null;
        try {
            log = Files.createTempFile("jnbd-interop-cmd", ".log");
            ProcessBuilder builder = new ProcessBuilder(command)
                .redirectErrorStream(true)
                .redirectOutput(log.toFile())
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")));
            if (cwd != null) builder.directory(cwd.toFile());
            builder.environment().put("JNBD_NO_BUILD", "1");
            builder.environment().put("LC_ALL", "C");
            Process process = builder.start();
            if (!process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
                process.descendants().forEach(ProcessHandle::destroyForcibly);
                process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                fail("%s did not finish within %s:%n%s", String.join(" ", command), timeout, Files.readString(log));
            }
            return new Result(List.copyOf(command), process.exitValue(), Files.readString(log));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        } finally {
            if (log != null) {
                try {
                    Files.deleteIfExists(log);
                } catch (IOException ignored) {
                    // a temp file; nothing else depends on it
                }
            }
        }
    }

    /** Writes {@code size} bytes of seeded random data, with some all-zero stretches so that
     *  clients exercise zero detection (WRITE_ZEROES, holes) as well as data. */
    static void writeRandomImage(Path file, long size, long seed) throws IOException {
        Random random = new Random(seed);
        byte[] block = new byte[1 << 20];
        try (OutputStream out = Files.newOutputStream(file)) {
            for (long done = 0; done < size; done += block.length) {
                int n = (int) Math.min(block.length, size - done);
                int kind = random.nextInt(5);
                if (kind == 0) {
                    java.util.Arrays.fill(block, 0, n, (byte) 0);
                } else {
                    random.nextBytes(block);
                    if (kind == 1) java.util.Arrays.fill(block, 4096, 64 * 1024, (byte) 0);
                }
                out.write(block, 0, n);
            }
        }
    }

    /** Reads len bytes of a file at an offset. */
    static byte[] readAt(Path file, long offset, int len) throws IOException {
        try (var channel = java.nio.channels.FileChannel.open(file)) {
            java.nio.ByteBuffer buffer = java.nio.ByteBuffer.allocate(len);
            while (buffer.hasRemaining()) {
                if (channel.read(buffer, offset + buffer.position()) < 0) break;
            }
            return java.util.Arrays.copyOf(buffer.array(), buffer.position());
        }
    }

    static String readAll(InputStream in) throws IOException {
        return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }

    static List<String> list(String... items) {
        return new ArrayList<>(List.of(items));
    }
}
