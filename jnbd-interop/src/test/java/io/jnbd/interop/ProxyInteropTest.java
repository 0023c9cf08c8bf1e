package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.client.Peer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code nbd:} exports of bin/jnbd serve in front of other servers, nbdkit's memory plugin and qemu-nbd over a
 * Unix socket: qemu-io's patterns written through the proxy are read back through it and straight from the
 * upstream, nbdcopy moves a file in and out through it unchanged, and fio's random mixed I/O at QD32 verifies.
 */
@Timeout(300)
class ProxyInteropTest {
    private static final Duration T = Duration.ofSeconds(120);
    private static final long SIZE = 64L << 20;

    @TempDir
    Path dir;

    @Test
    void inFrontOfNbdkitMemory() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("nbdkit", "qemu-io", "nbdcopy", "fio");
        Path socket = dir.resolve("nbdkit.sock");
        try (Peer nbdkit = Peer.startUnix(socket, List.of("nbdkit", "--foreground", "--exit-with-parent",
            "--unix", socket.toString(), "memory", "64M"))) {
            exercise("nbd+unix:///?socket=" + socket);
        }
    }

    @Test
    void inFrontOfQemuNbd() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("qemu-nbd", "qemu-io", "nbdcopy", "fio");
        Path socket = dir.resolve("qemu-nbd.sock");
        Path image = dir.resolve("disk.img");
        try (var f = new java.io.RandomAccessFile(image.toFile(), "rw")) {
            f.setLength(SIZE);
        }
        try (Peer qemuNbd = Peer.startUnix(socket, List.of("qemu-nbd", "-f", "raw", "-k", socket.toString(), "-x", "disk",
            "-t", "--shared=8", "--cache=none", "--discard=unmap", image.toString()))) {
            exercise("nbd+unix:///disk?socket=" + socket);
        }
    }

    private void exercise(String upstream) throws Exception {
        try (JnbdServer proxy = JnbdServer.start(dir, "--export", "p=nbd:" + upstream + ",timeout=60s")) {
            String through = proxy.uri("p");
            qemuIo(through,
                "write -P 0xab 0 1M",
                "read -P 0xab 0 1M",
                "write -f -P 0x11 5M 4k",
                "flush",
                "read -P 0x11 5M 4k",
                "write -P 0x77 8M 2M",
                "write -z 8M 1M",
                "read -P 0 8M 1M",
                "read -P 0x77 9M 1M",
                "write -P 0x3c 12M 512",
                "read -P 0x3c 12M 512",
                "aio_write -P 0x5a 16M 4M",
                "aio_flush",
                "read -P 0x5a 16M 4M",
                "write -P 0xee 63M 1M",
                "read -P 0xee 63M 1M");
            // The data is the upstream's: read there directly.
            qemuIo(upstream, "read -P 0xab 0 1M", "read -P 0x11 5M 4k", "read -P 0 8M 1M", "read -P 0x5a 16M 4M");

            Path source = dir.resolve("source.img");
            Interop.writeRandomImage(source, SIZE, 7);
            Interop.run(T, dir, "nbdcopy", "--flush", source.toString(), through).assertSuccess();
            Path out = dir.resolve("out.img");
            Interop.run(T, dir, "nbdcopy", "--connections=4", "--requests=64", through, out.toString()).assertSuccess();
            assertThat(Files.mismatch(source, out)).as("nbdcopy in and out through the proxy").isEqualTo(-1L);

            Interop.Result fio = Interop.run(T, dir, "fio", "--name=proxy", "--ioengine=nbd", "--uri=" + through,
                "--rw=randrw", "--bsrange=4k-1M", "--iodepth=32", "--size=" + SIZE, "--verify=crc32c",
                "--do_verify=1", "--verify_fatal=1", "--randrepeat=0", "--output-format=normal").assertSuccess();
            assertThat(fio.output()).as(fio.toString())
                .contains("Run status group 0")
                .doesNotContain("verify: bad")
                .doesNotContainIgnoringCase("crc32c: verify failed")
                .doesNotContainPattern("err=\\s*-?[1-9]");
        }
    }

    private void qemuIo(String uri, String... commands) {
        List<String> argv = new ArrayList<>(List.of("qemu-io", "-f", "raw", uri));
        for (String c : commands) {
            argv.add("-c");
            argv.add(c);
        }
        Interop.Result r = Interop.run(T, dir, argv).assertSuccess();
        assertThat(r.output()).as(r.toString())
            .doesNotContain("Pattern verification failed")
            .doesNotContainIgnoringCase("failed")
            .doesNotContainIgnoringCase("error");
    }
}
