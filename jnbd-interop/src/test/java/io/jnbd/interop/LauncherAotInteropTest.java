package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * bin/jnbd's AOT cache, as a user meets it: built on the first run after a build, used by the next, and never
 * a line on a tool's stdout, whether the cache is there, fresh or stale.
 */
@Timeout(300)
class LauncherAotInteropTest {

    @BeforeAll
    static void enabled() {
        Interop.requireEnabled();
    }

    /** Runs bin/jnbd; stdout and stderr apart. */
    private record Out(int exit, String out, String err) {
    }

    private static Out jnbd(Path dir, Map<String, String> env, String... args) throws Exception {
        List<String> command = new java.util.ArrayList<>(List.of(Interop.jnbd().toString()));
        command.addAll(List.of(args));
        ProcessBuilder b = new ProcessBuilder(command).redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
            .redirectOutput(dir.resolve("out").toFile()).redirectError(dir.resolve("err").toFile());
        b.environment().remove("JNBD_NO_BUILD");
        b.environment().putAll(env);
        Process p = b.start();
        if (!p.waitFor(240, TimeUnit.SECONDS)) {
            p.descendants().forEach(ProcessHandle::destroyForcibly);
            p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            throw new AssertionError("bin/jnbd " + String.join(" ", args) + " did not finish in 240 s");
        }
        return new Out(p.exitValue(), Files.readString(dir.resolve("out")), Files.readString(dir.resolve("err")));
    }

    @Test
    void theCacheIsBuiltUsedAndNeverSeenOnStdout(@TempDir Path dir) throws Exception {
        Path aot = Interop.root().resolve("jnbd-cli/target/aot");
        Out first = jnbd(dir, Map.of(), "--version");
        assertThat(first.exit()).as(first.err()).isZero();
        assertThat(first.out()).isEqualTo("jnbd 0.1.0\n");
        assertThat(aot.resolve("server.aot")).isNotEmptyFile();
        assertThat(aot.resolve("client.aot")).isNotEmptyFile();
        // The cache holds picocli as rewritten class files: the class path it was trained with says so.
        String cp = Files.readString(aot.resolve("classpath.txt")).strip();
        assertThat(cp.split(File.pathSeparator)).anyMatch(e -> e.startsWith(aot.toString()) && e.contains("picocli"));

        Path disk = dir.resolve("disk.img");
        Interop.writeRandomImage(disk, 1 << 20, 7);
        Path copy = dir.resolve("copy.img");
        Out up = jnbd(dir, Map.of("JNBD_NO_BUILD", "1"), "copy", "--no-progress", disk.toString(), copy.toString());
        assertThat(up.exit()).as(up.err()).isZero();
        assertThat(up.out()).isEmpty();
        assertThat(Files.mismatch(disk, copy)).isEqualTo(-1);

        // A jar rebuilt after the cache: the JVM would refuse the cache and say so on stdout; bin/jnbd must not use it.
        Path cli = Files.list(Interop.root().resolve("jnbd-cli/target"))
            .filter(p -> p.getFileName().toString().matches("jnbd-cli-.*\\.jar")).findFirst().orElseThrow();
        FileTime was = Files.getLastModifiedTime(cli);
        try {
            Files.setLastModifiedTime(cli, FileTime.from(Instant.now().plusSeconds(5)));
            Out stale = jnbd(dir, Map.of("JNBD_NO_BUILD", "1"), "--version");
            assertThat(stale.exit()).isZero();
            assertThat(stale.out()).isEqualTo("jnbd 0.1.0\n");
            assertThat(stale.err()).isEmpty();
        } finally {
            Files.setLastModifiedTime(cli, was);
        }
        Out off = jnbd(dir, Map.of("JNBD_NO_BUILD", "1", "JNBD_AOT", "0"), "--version");
        assertThat(off.out()).isEqualTo("jnbd 0.1.0\n");
    }
}
