package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@code bin/jnbd serve --config FILE} (the format in docs/server.md) and --stats-interval, seen by real clients. */
@Timeout(120)
class ConfigInteropTest {

    private static final Duration T = Duration.ofSeconds(60);

    @TempDir
    static Path dir;
    static JnbdServer server;
    static Path socket;

    @BeforeAll
    static void startServer() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("nbdinfo", "qemu-io");
        int port = Interop.freePort();
        socket = dir.resolve("cfg.sock");
        Path config = dir.resolve("jnbd.toml");
        Files.writeString(config, String.join("\n",
            "# interop test configuration",
            "listen = [\"127.0.0.1:" + port + "\"]",
            "unix = [\"" + socket + "\"]",
            "default-export = \"scratch\"",
            "[export]",
            "disk = \"file:" + dir.resolve("disk.img") + ",size=16M\"",
            "[export.scratch]",
            "memory = \"8M\"",
            "description = \"Scratch space, for tests\"",
            ""));
        server = JnbdServer.start(dir, port,
            List.of(Interop.jnbd().toString(), "serve", "--config", config.toString(), "--stats-interval", "1"));
    }

    @AfterAll
    static void stopServer() throws Exception {
        if (server != null) server.stop();
    }

    @Test
    void exportsFromTheFileAreListed() {
        String out = Interop.run(T, dir, "nbdinfo", "--list", "nbd://127.0.0.1:" + server.port()).assertSuccess().output();
        assertThat(out).contains("export=\"disk\"", "export=\"scratch\"");
    }

    @Test
    void defaultExportAndDescriptionFromTheFile() {
        NbdinfoJson info = new NbdinfoJson(Interop.run(T, dir, "nbdinfo", "--json",
            "nbd://127.0.0.1:" + server.port() + "/").assertSuccess().output());
        assertThat(info.number("export-size")).as("the empty name is default-export = scratch").isEqualTo(8L << 20);
        assertThat(info.string("description")).isEqualTo("Scratch space, for tests");
    }

    @Test
    void unixSocketFromTheFile() {
        Interop.run(T, dir, "qemu-io", "-f", "raw", "nbd+unix:///disk?socket=" + socket,
            "-c", "write -P 0x21 0 64k", "-c", "read -P 0x21 0 64k").assertSuccess();
    }

    @Test
    void statsAreLoggedEveryInterval() throws Exception {
        Interop.run(T, dir, "qemu-io", "-f", "raw", server.uri("disk"),
            "-c", "write -P 0x33 1M 1M", "-c", "read -P 0x33 1M 1M").assertSuccess();
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (!server.log().contains("p99=") && System.nanoTime() < deadline) Thread.sleep(200);
        assertThat(server.log()).as("server log with --stats-interval 1").contains("p50=", "p99=");
    }
}
