package io.jnbd.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The progress bar of jnbd copy, in a process of its own: the bar writes to the process's real stderr, which
 * an in-process run cannot capture.
 */
class ProgressTest {

    @Test
    void copyIsSilentWhenStderrIsNotATerminal(@TempDir Path dir) throws Exception {
        Path src = disk(dir);
        Result r = run(dir, command(List.of("copy", src.toString(), dir.resolve("dst.img").toString())));
        assertThat(r.exit).as(r.toString()).isZero();
        assertThat(r.output).as("no progress lines, no warnings: stdout and stderr both").isEmpty();
        assertThat(Files.mismatch(src, dir.resolve("dst.img"))).isEqualTo(-1);
    }

    @Test
    void copyDrawsABarWithRateAndTimeLeftOnATerminal(@TempDir Path dir) throws Exception {
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/script")), "script(1) from util-linux");
        Path src = disk(dir);
        Result r = run(dir, onTerminal(command(List.of("copy", src.toString(), dir.resolve("dst.img").toString()))));
        assertThat(r.exit).as(r.toString()).isZero();
        // The final drawing: the whole disk, in MiB, with the elapsed time, the time left and the rate.
        assertThat(r.output).as(r.toString()).containsPattern("copy 100% \\[=+] 24/24 MiB \\(\\d+:\\d\\d:\\d\\d / \\d+:\\d\\d:\\d\\d\\) \\S+ MiB/s");
        assertThat(Files.mismatch(src, dir.resolve("dst.img"))).isEqualTo(-1);
    }

    @Test
    void noProgressOverridesATerminal(@TempDir Path dir) throws Exception {
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/script")), "script(1) from util-linux");
        Path src = disk(dir);
        Result r = run(dir, onTerminal(command(List.of("copy", "--no-progress", src.toString(),
            dir.resolve("dst.img").toString()))));
        assertThat(r.exit).as(r.toString()).isZero();
        assertThat(r.output).as(r.toString()).isEmpty();
    }

    private static Path disk(Path dir) throws Exception {
        Path src = dir.resolve("src.img");
        byte[] block = new byte[4 << 20];
        new Random(5).nextBytes(block);
        try (RandomAccessFile f = new RandomAccessFile(src.toFile(), "rw")) {
            f.setLength(24L << 20);
            f.seek(8L << 20);
            f.write(block);
        }
        return src;
    }

    /** java running jnbd with this JVM's classpath, as bin/jnbd would run it. */
    private static List<String> command(List<String> args) {
        String classpath = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        List<String> c = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
            "--enable-native-access=ALL-UNNAMED", "-Xmx256m", "-cp", classpath, "io.jnbd.cli.Main"));
        c.addAll(args);
        return c;
    }

    /** The command under script(1), which gives it a pseudo-terminal for stdin, stdout and stderr and copies what it shows. */
    private static List<String> onTerminal(List<String> command) {
        String line = String.join(" ", command.stream().map(a -> "'" + a.replace("'", "'\\''") + "'").toList());
        return List.of("/usr/bin/script", "-q", "-e", "-c", line, "/dev/null");
    }

    private record Result(int exit, String output) {
        @Override
        public String toString() {
            return "exit " + exit + "\n--- output\n" + output;
        }
    }

    private static Result run(Path dir, List<String> command) throws Exception {
        Process p = new ProcessBuilder(command).directory(dir.toFile()).redirectErrorStream(true)
            .redirectInput(ProcessBuilder.Redirect.from(Path.of("/dev/null").toFile())).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(2, TimeUnit.MINUTES)) {
            p.destroyForcibly();
            throw new AssertionError("jnbd did not end: " + out);
        }
        return new Result(p.exitValue(), out);
    }
}
