package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code bin/jnbd serve} with no options, exactly as the README tells a new user to run it, and the
 * README's connect lines against it. Needs the well-known port 10809 free; skipped otherwise.
 */
@Timeout(180)
class DefaultServerInteropTest {

    private static final Duration T = Duration.ofSeconds(60);
    private static final int PORT = 10809;
    private static final long GiB = 1L << 30;

    @TempDir
    static Path dir;
    static JnbdServer server;

    @BeforeAll
    static void startServer() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("nbdinfo", "qemu-io", "qemu-img");
        assumeFalse(Interop.accepts(PORT), "port 10809 is in use: skipping the default-server test");
        server = JnbdServer.start(dir, PORT, List.of(Interop.jnbd().toString(), "serve"));
    }

    @AfterAll
    static void stopServer() throws Exception {
        if (server != null) server.stop();
    }

    @Test
    void servesASparseOneGibDefaultImage() throws Exception {
        Path image = dir.resolve("jnbd-data/default.img");
        assertThat(image).exists();
        assertThat(Files.size(image)).isEqualTo(GiB);
        String blocks = Interop.run(T, dir, "stat", "-c", "%b %B", image.toString()).assertSuccess().output().strip();
        String[] parts = blocks.split(" ");
        long allocated = Long.parseLong(parts[0]) * Long.parseLong(parts[1]);
        assertThat(allocated).as("bytes allocated to the fresh default image (sparse)").isLessThan(64L << 20);
    }

    @Test
    void startupPrintsHowToConnect() {
        assertThat(server.log()).contains("nbdinfo", "qemu-img", "default");
    }

    @Test
    void readmeNbdinfoLines() {
        String list = Interop.run(T, dir, "nbdinfo", "--list", "nbd://127.0.0.1:10809").assertSuccess().output();
        assertThat(list).contains("export=\"default\"");
        String info = Interop.run(T, dir, "nbdinfo", "nbd://127.0.0.1:10809/default").assertSuccess().output();
        assertThat(info).contains("export-size: 1073741824");
        String empty = Interop.run(T, dir, "nbdinfo", "nbd://127.0.0.1:10809").assertSuccess().output();
        assertThat(empty).as("the empty name is the default export").contains("export-size: 1073741824");
    }

    @Test
    void readmeQemuLines() {
        String info = Interop.run(T, dir, "qemu-img", "info", "nbd://127.0.0.1:10809/default").assertSuccess().output();
        assertThat(info).contains("virtual size: 1 GiB (1073741824 bytes)");
        Interop.Result io = Interop.run(T, dir, "qemu-io", "-f", "raw", "nbd://127.0.0.1:10809/default",
            "-c", "write -P 0xab 0 1M", "-c", "read -P 0xab 0 1M").assertSuccess();
        assertThat(io.output()).doesNotContain("Pattern verification failed").contains("read 1048576/1048576 bytes");
    }
}
