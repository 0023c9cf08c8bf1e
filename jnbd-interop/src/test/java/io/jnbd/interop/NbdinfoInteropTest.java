package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** nbdinfo (libnbd) against bin/jnbd serve: the export list, sizes and every advertised flag. */
@Timeout(120)
class NbdinfoInteropTest {

    private static final Duration T = Duration.ofSeconds(60);
    private static final String[] WRITE_FLAGS = {
        "can_trim", "can_zero", "can_fast_zero", "can_flush", "can_fua", "can_multi_conn", "can_cache", "can_df"};

    @TempDir
    static Path dir;
    static JnbdServer server;
    static Path socket;

    @BeforeAll
    static void startServer() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("nbdinfo");
        socket = dir.resolve("jnbd.sock");
        // a read-only export serves an existing file; it does not create one
        try (var ro = new java.io.RandomAccessFile(dir.resolve("ro.img").toFile(), "rw")) {
            ro.setLength(16L << 20);
        }
        server = JnbdServer.start(dir,
            "--unix", socket.toString(),
            "--export", "disk=file:" + dir.resolve("disk.img") + ",size=64M,description=interop disk",
            "--export", "ro=file:" + dir.resolve("ro.img") + ",size=16M,readonly",
            "--export", "mem=memory:32M",
            "--export", "direct=file:" + dir.resolve("direct.img") + ",size=8M,mode=direct",
            "--default-export", "mem");
    }

    @AfterAll
    static void stopServer() throws Exception {
        if (server != null) server.stop();
    }

    private static NbdinfoJson json(String uri) {
        return new NbdinfoJson(Interop.run(T, dir, "nbdinfo", "--json", uri).assertSuccess().output());
    }

    @Test
    void listShowsEveryExport() {
        String out = Interop.run(T, dir, "nbdinfo", "--list", "nbd://127.0.0.1:" + server.port())
            .assertSuccess().output();
        assertThat(out).contains("export=\"disk\"", "export=\"ro\"", "export=\"mem\"", "export=\"direct\"");
    }

    @Test
    void listShowsDescriptions() {
        // nbdinfo --list prints the description that NBD_OPT_LIST's NBD_REP_SERVER reply carries
        // after the name (as nbdkit's exportname filter does), not NBD_INFO_DESCRIPTION.
        String out = Interop.run(T, dir, "nbdinfo", "--list", "nbd://127.0.0.1:" + server.port())
            .assertSuccess().output();
        assertThat(out).contains("description: interop disk");
    }

    @Test
    void listInJsonNamesEveryExport() {
        String out = Interop.run(T, dir, "nbdinfo", "--list", "--json", "nbd://127.0.0.1:" + server.port())
            .assertSuccess().output();
        assertThat(out).contains("\"export-name\": \"disk\"", "\"export-name\": \"ro\"",
            "\"export-name\": \"mem\"", "\"export-name\": \"direct\"");
    }

    @Test
    void fileExportAdvertisesEveryFeature() {
        NbdinfoJson info = json(server.uri("disk"));
        assertThat(info.number("export-size")).as("export-size").isEqualTo(64L << 20);
        assertThat(info.bool("is_read_only")).as("is_read_only").isFalse();
        for (String flag : WRITE_FLAGS) {
            assertThat(info.bool(flag)).as(flag + " in\n" + info.text()).isTrue();
        }
        assertThat(info.contexts()).contains("base:allocation");
        assertThat(info.text()).contains("\"protocol\": \"newstyle-fixed\"");
        assertThat(info.bool("structured")).as("structured replies").isTrue();
        assertThat(info.string("description")).isEqualTo("interop disk");
    }

    @Test
    void readOnlyExportAdvertisesNoWriteCommands() {
        NbdinfoJson info = json(server.uri("ro"));
        assertThat(info.number("export-size")).isEqualTo(16L << 20);
        assertThat(info.bool("is_read_only")).as("is_read_only").isTrue();
        // As nbdkit -r does: commands that would modify the export are not advertised.
        for (String flag : new String[] {"can_trim", "can_zero", "can_fast_zero", "can_fua"}) {
            assertThat(info.bool(flag)).as(flag + " in\n" + info.text()).isFalse();
        }
        assertThat(info.contexts()).contains("base:allocation");
    }

    @Test
    void memoryExportHasItsSize() {
        NbdinfoJson info = json(server.uri("mem"));
        assertThat(info.number("export-size")).isEqualTo(32L << 20);
        assertThat(info.bool("is_read_only")).isFalse();
        for (String flag : new String[] {"can_trim", "can_zero", "can_multi_conn", "can_df"}) {
            assertThat(info.bool(flag)).as(flag + " in\n" + info.text()).isTrue();
        }
        assertThat(info.contexts()).contains("base:allocation");
    }

    @Test
    void directExportAdvertisesItsAlignment() {
        NbdinfoJson info = json(server.uri("direct"));
        assertThat(info.number("export-size")).isEqualTo(8L << 20);
        for (String flag : WRITE_FLAGS) {
            assertThat(info.bool(flag)).as(flag + " in\n" + info.text()).isTrue();
        }
        assertThat(info.number("block_size_minimum")).as("block_size_minimum (O_DIRECT alignment) in\n" + info.text())
            .isNotNull().isGreaterThanOrEqualTo(512L);
    }

    @Test
    void emptyNameIsTheDefaultExport() {
        NbdinfoJson info = json("nbd://127.0.0.1:" + server.port() + "/");
        assertThat(info.number("export-size")).as("size of the default export (mem)").isEqualTo(32L << 20);
    }

    @Test
    void unknownExportIsRefused() {
        Interop.Result result = Interop.run(T, dir, "nbdinfo", server.uri("no-such-export"));
        assertThat(result.exitCode()).as(result.toString()).isNotZero();
    }

    @Test
    void unixSocketServesTheSameExports() {
        NbdinfoJson info = json("nbd+unix:///disk?socket=" + socket);
        assertThat(info.number("export-size")).isEqualTo(64L << 20);
    }
}
