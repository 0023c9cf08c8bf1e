package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.HexFormat;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Per-client cow overlays (cow-overlay=client) of bin/jnbd serve, through real clients: qemu-io patterns, nbdcopy with
 * four connections of one client (multi-conn), fio verify; two clients' overlays isolated, each kept across a restart
 * of the server, and the base file unchanged; a client's read-only view (EXPORT/NAME@ro) read by nbdcopy; the export
 * alone, the base read-only, so that nbdinfo --list can open it.
 */
@Timeout(300)
class CowInteropTest {
    private static final Duration T = Duration.ofSeconds(120);
    private static final long SIZE = 64L << 20;

    @TempDir
    Path dir;

    private JnbdServer serve(Path base) throws Exception {
        return JnbdServer.start(dir, "--export",
            "boot=file:" + base + ",filter=cow,cow-overlay=client,cow-dir=" + dir.resolve("cow"));
    }

    private static String sha256(Path p) throws Exception {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(p)));
    }

    private Path copyOut(JnbdServer server, String export, String file) {
        Path out = dir.resolve(file);
        Interop.run(T, dir, "nbdcopy", server.uri(export), out.toString()).assertSuccess();
        return out;
    }

    @Test
    void clientsHaveIsolatedPersistentOverlaysOverAnUnchangedBase() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("qemu-io", "nbdcopy", "fio", "nbdinfo");
        Path base = dir.resolve("base.img"), source = dir.resolve("src.img");
        Interop.writeRandomImage(base, SIZE, 1);
        Interop.writeRandomImage(source, SIZE, 2);
        String baseSum = sha256(base);

        JnbdServer server = serve(base);
        try {
            Interop.Result q = Interop.run(T, dir, "qemu-io", "-f", "raw", server.uri("boot/pc1"),
                "-c", "write -P 0xab 0 1M", "-c", "write -P 0xcd 3000 5000", "-c", "write -z 8M 1M",
                "-c", "flush", "-c", "read -P 0xab 0 3000", "-c", "read -P 0xcd 3000 5000", "-c", "read -P 0 8M 1M").assertSuccess();
            assertThat(q.output()).as(q.toString()).doesNotContainIgnoringCase("failed").doesNotContainIgnoringCase("error");

            Interop.run(T, dir, "nbdcopy", "--flush", "--connections=4", "--requests=64", source.toString(),
                server.uri("boot/pc2")).assertSuccess();
            assertThat(Files.mismatch(source, copyOut(server, "boot/pc2", "pc2.img"))).as("pc2 after nbdcopy").isEqualTo(-1L);

            Interop.Result fio = Interop.run(T, dir, "fio", "--name=cow", "--ioengine=nbd", "--uri=" + server.uri("boot/pc3"),
                "--rw=randrw", "--bsrange=512-128k", "--iodepth=16", "--size=32M", "--verify=crc32c", "--do_verify=1",
                "--verify_fatal=1", "--randrepeat=0", "--output-format=normal").assertSuccess();
            assertThat(fio.output()).as(fio.toString()).contains("Run status group 0").doesNotContain("verify: bad")
                .doesNotContainPattern("err=\\s*-?[1-9]");

            assertThat(Files.mismatch(base, copyOut(server, "boot/pc4", "pc4.img"))).as("a new client reads the base").isEqualTo(-1L);
        } finally {
            server.stop();
        }
        assertThat(sha256(base)).as("the base's checksum").isEqualTo(baseSum);

        server = serve(base);
        try {
            assertThat(Files.mismatch(source, copyOut(server, "boot/pc2", "pc2-again.img"))).as("pc2 after a restart").isEqualTo(-1L);
            assertThat(Files.mismatch(source, copyOut(server, "boot/pc2@ro", "pc2-view.img"))).as("pc2's read-only view")
                .isEqualTo(-1L);
            Interop.Result ro = Interop.run(T, dir, "qemu-io", "-f", "raw", server.uri("boot/pc2@ro"), "-c", "write -P 1 0 512");
            assertThat(ro.toString()).as("qemu-io opening the view to write").contains("Permission denied").doesNotContain("wrote 512");
            Interop.Result q = Interop.run(T, dir, "qemu-io", "-f", "raw", server.uri("boot/pc1"),
                "-c", "read -P 0xab 0 3000", "-c", "read -P 0xcd 3000 5000", "-c", "read -P 0 8M 1M").assertSuccess();
            assertThat(q.output()).as("pc1 after a restart: %s", q).doesNotContainIgnoringCase("failed");
            Interop.Result bad = Interop.run(T, dir, "qemu-io", "-f", "raw", server.uri("boot/a..b"), "-c", "read 0 512");
            assertThat(bad.toString()).as("a bad overlay name").containsIgnoringCase("overlay name not allowed");
            // nbdinfo --list opens every export it lists: the export alone is the base, read-only
            String list = Interop.run(T, dir, "nbdinfo", "--list", "nbd://127.0.0.1:" + server.port()).assertSuccess().output();
            assertThat(list).as("nbdinfo --list").contains("export=\"boot\"").contains("is_read_only: true");
            assertThat(Files.mismatch(base, copyOut(server, "boot", "bare.img"))).as("the export alone reads the base").isEqualTo(-1L);
        } finally {
            server.stop();
        }
        assertThat(sha256(base)).isEqualTo(baseSum);
    }
}
