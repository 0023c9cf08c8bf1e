package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** bin/jnbd serve as a user meets it: --help, and one clear line for each start-up mistake. */
@Timeout(120)
class CliInteropTest {

    private static final Duration T = Duration.ofSeconds(60);

    @TempDir
    Path dir;

    @BeforeEach
    void enabled() {
        Interop.requireEnabled();
    }

    private Interop.Result jnbd(String... args) {
        List<String> argv = new java.util.ArrayList<>(List.of(Interop.jnbd().toString()));
        argv.addAll(List.of(args));
        return Interop.run(T, dir, argv);
    }

    @Test
    void serveHelpNamesEveryOption() {
        Interop.Result help = jnbd("serve", "--help");
        assertThat(help.exitCode()).as(help.toString()).isZero();
        assertThat(help.output()).contains(
            "--listen", "--unix", "--export", "--config", "--default-export", "--stats-interval",
            "--send-timeout", "--busy-poll", "--send-buffer", "--io-threads", "--requests-in-flight", "--buffer-memory",
            "--max-connections", "--operator-slots", "--check", "--metrics",
            "file:", "memory:", "size=", "readonly", "mode=", "cached", "direct", "description=");
    }

    @Test
    void topLevelHelpNamesServe() {
        Interop.Result help = jnbd("--help");
        assertThat(help.exitCode()).as(help.toString()).isZero();
        assertThat(help.output()).contains("serve");
    }

    @ParameterizedTest(name = "--export {0}")
    @CsvSource({"bad=nonsense:xyz, nonsense", "noequals, noequals", "x=memory:lots, lots",
        "'x=file:disk.img,mode=turbo', turbo"})
    void badExportSpecIsOneLineAndNonZero(String spec, String named) {
        Interop.Result result = jnbd("serve", "--listen", "127.0.0.1:" + Interop.freePort(), "--export", spec);
        assertThat(result.exitCode()).as(result.toString()).isNotZero();
        assertOneLineError(result, named);
    }

    @Test
    void fileThatCannotBeOpenedIsOneLineAndNonZero() {
        Interop.Result result = jnbd("serve", "--listen", "127.0.0.1:" + Interop.freePort(),
            "--export", "x=file:/nonexistent-dir/x.img");
        assertThat(result.exitCode()).as(result.toString()).isNotZero();
        assertOneLineError(result, "/nonexistent-dir/x.img");
    }

    @Test
    void busyPollOutOfRangeIsOneLineAndNonZero() {
        Interop.Result result = jnbd("serve", "--listen", "127.0.0.1:" + Interop.freePort(), "--busy-poll", "-5",
            "--export", "m=memory:1M");
        assertThat(result.exitCode()).as(result.toString()).isEqualTo(2);
        assertOneLineError(result, "--busy-poll");
    }

    @ParameterizedTest(name = "{0} {1}")
    @CsvSource({"--max-connections,0", "--operator-slots,-1"})
    void badConnectionLimitIsOneLineAndNonZero(String option, String value) {
        Interop.Result result = jnbd("serve", "--listen", "127.0.0.1:" + Interop.freePort(), option, value,
            "--export", "m=memory:1M");
        assertThat(result.exitCode()).as(result.toString()).isEqualTo(2);
        assertOneLineError(result, option);
    }

    @ParameterizedTest(name = "--send-buffer {0}")
    @CsvSource({"1K", "huge", "1G"})
    void badSendBufferIsOneLineAndNonZero(String value) {
        Interop.Result result = jnbd("serve", "--listen", "127.0.0.1:" + Interop.freePort(), "--send-buffer", value,
            "--export", "m=memory:1M");
        assertThat(result.exitCode()).as(result.toString()).isEqualTo(2);
        assertOneLineError(result, "--send-buffer");
    }

    @Test
    void portInUseIsOneLineAndNonZero() throws Exception {
        try (ServerSocket taken = new ServerSocket()) {
            taken.bind(new InetSocketAddress("127.0.0.1", 0));
            int port = taken.getLocalPort();
            Interop.Result result = jnbd("serve", "--listen", "127.0.0.1:" + port, "--export", "m=memory:1M");
            assertThat(result.exitCode()).as(result.toString()).isNotZero();
            assertOneLineError(result, Integer.toString(port));
        }
    }

    @ParameterizedTest(name = "--metrics {0}")
    @CsvSource({"nonsense, nonsense", "127.0.0.1:99999, 99999", "127.0.0.1:http, 127.0.0.1:http",
        "no-such-host.invalid:9100, no-such-host.invalid"})
    void badMetricsAddressIsOneLineAndExitTwoWithNothingStarted(String value, String named) {
        Path image = dir.resolve("x.img");
        Interop.Result result = jnbd("serve", "--listen", "127.0.0.1:" + Interop.freePort(), "--metrics", value,
            "--export", "x=file:" + image + ",size=1M");
        assertThat(result.exitCode()).as(result.toString()).isEqualTo(2);
        assertOneLineError(result, named);
        assertNothingStarted(result, image);
    }

    @Test
    void metricsPortInUseIsOneLineAndExitTwoWithNothingStarted() throws Exception {
        try (ServerSocket taken = new ServerSocket()) {
            taken.bind(new InetSocketAddress("127.0.0.1", 0));
            int port = taken.getLocalPort();
            Path image = dir.resolve("x.img");
            Interop.Result result = jnbd("serve", "--listen", "127.0.0.1:" + Interop.freePort(), "--metrics", "127.0.0.1:" + port,
                "--export", "x=file:" + image + ",size=1M");
            assertThat(result.exitCode()).as(result.toString()).isEqualTo(2);
            assertOneLineError(result, "127.0.0.1:" + port);
            assertNothingStarted(result, image);
        }
    }

    /** No NBD listener was opened, and no export: its image file was never created. */
    private static void assertNothingStarted(Interop.Result result, Path image) {
        assertThat(result.output()).as(result.toString()).doesNotContain("listening on");
        assertThat(image).as("the export's image file").doesNotExist();
    }

    /**
     * No stack trace, and exactly one line that names the problem (log lines about exports the
     * server set up before it failed, and a "Try --help" hint, are allowed around it).
     */
    private static void assertOneLineError(Interop.Result result, String mentioned) {
        assertThat(result.output()).as(result.toString())
            .doesNotContain("\tat ")
            .doesNotContain("Exception in thread")
            .doesNotContain("Caused by:");
        long naming = result.output().lines().filter(line -> line.contains(mentioned)).count();
        assertThat(naming).as("lines naming '%s' in:%n%s", mentioned, result).isEqualTo(1);
    }
}
