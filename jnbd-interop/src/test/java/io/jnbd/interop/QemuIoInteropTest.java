package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** qemu-io (QEMU's NBD client) against bin/jnbd serve: patterns written and read back, sync and aio. */
@Timeout(180)
class QemuIoInteropTest {

    private static final Duration T = Duration.ofSeconds(120);

    @TempDir
    static Path dir;
    static JnbdServer server;

    @BeforeAll
    static void startServer() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("qemu-io");
        server = JnbdServer.start(dir,
            "--export", "cached=file:" + dir.resolve("cached.img") + ",size=64M",
            "--export", "direct=file:" + dir.resolve("direct.img") + ",size=64M,mode=direct",
            "--export", "mem=memory:64M",
            // the cached export's file once more, in direct mode
            "--export", "cached-direct=file:" + dir.resolve("cached.img") + ",mode=direct");
    }

    @AfterAll
    static void stopServer() throws Exception {
        if (server != null) server.stop();
    }

    /** qemu-io -f raw URI -c CMD...; exit 0 and no failed command or pattern mismatch. */
    private static String qemuIo(String export, List<String> commands) {
        List<String> argv = new ArrayList<>(List.of("qemu-io", "-f", "raw", server.uri(export)));
        for (String command : commands) {
            argv.add("-c");
            argv.add(command);
        }
        Interop.Result result = Interop.run(T, dir, argv).assertSuccess();
        assertThat(result.output()).as(result.toString())
            .doesNotContain("Pattern verification failed")
            .doesNotContainIgnoringCase("failed")
            .doesNotContainIgnoringCase("error");
        return result.output();
    }

    @ParameterizedTest
    @ValueSource(strings = {"cached", "direct", "mem"})
    void writeThenReadPatterns(String export) {
        String out = qemuIo(export, List.of(
            "write -P 0xab 0 1M",
            "read -P 0xab 0 1M",
            "write -P 0xcd 3M 64k",
            "read -P 0xcd 3M 64k",
            "read -P 0xab 0 1M",
            // FUA write, then an explicit flush
            "write -f -P 0x11 5M 4k",
            "flush",
            "read -P 0x11 5M 4k",
            // WRITE_ZEROES over data, with and without permission to punch a hole
            "write -P 0x77 8M 2M",
            "write -z 8M 1M",
            "write -z -u 9M 1M",
            "read -P 0 8M 2M",
            // unaligned to anything but 512
            "write -P 0x3c 12M 512",
            "read -P 0x3c 12M 512",
            // the last block of the export
            "write -P 0x5e 63M 1M",
            "read -P 0x5e 63M 1M",
            // a large request
            "write -P 0x42 16M 8M",
            "read -P 0x42 16M 8M"));
        assertThat(out).contains("wrote 1048576/1048576 bytes", "read 8388608/8388608 bytes");
    }

    @ParameterizedTest
    @ValueSource(strings = {"cached", "direct", "mem"})
    void aioManyRequestsInFlight(String export) {
        List<String> commands = new ArrayList<>();
        for (int i = 0; i < 32; i++) {
            commands.add(String.format("aio_write -P 0x%02x %dk 64k", i + 1, 20 * 1024 + i * 64));
        }
        commands.add("aio_flush");
        for (int i = 31; i >= 0; i--) {
            commands.add(String.format("aio_read -P 0x%02x %dk 64k", i + 1, 20 * 1024 + i * 64));
        }
        commands.add("aio_flush");
        // and once more, the first and last chunks on their own
        commands.add("aio_read -P 0x01 20M 64k");
        commands.add("aio_read -P 0x20 " + (20 * 1024 + 31 * 64) + "k 64k");
        commands.add("aio_flush");
        String out = qemuIo(export, commands);
        assertThat(out).contains("wrote 65536/65536 bytes", "read 65536/65536 bytes");
    }

    @Test
    void writesReachTheBackingFile() throws Exception {
        qemuIo("cached", List.of("write -P 0x9d 40M 128k", "flush"));
        byte[] data = Interop.readAt(dir.resolve("cached.img"), 40L << 20, 128 << 10);
        assertThat(data).hasSize(128 << 10).containsOnly((byte) 0x9d);
    }

    @Test
    void directAndCachedPathsSeeTheSameData() {
        // One connection writes through O_DIRECT, a fresh one reads back: nothing is lost between them.
        qemuIo("direct", List.of("write -P 0x6b 44M 1M", "flush"));
        qemuIo("direct", List.of("read -P 0x6b 44M 1M"));
    }

    @Test
    void oneFileExportedInBothModesShowsEachExportTheOthersWrites() {
        qemuIo("cached", List.of("write -P 0x21 48M 1M", "flush"));
        qemuIo("cached-direct", List.of("read -P 0x21 48M 1M",
            // a sub-block write through the direct export: a read-modify-write of its 4K block
            "write -P 0x22 48.5M 512"));
        qemuIo("cached", List.of("read -P 0x21 48M 512k", "read -P 0x22 48.5M 512", "read -P 0x21 " + ((48L << 20) + (512 << 10) + 512) + " 4096"));
        qemuIo("cached-direct", List.of("read -P 0x22 48.5M 512", "read -P 0x21 " + ((48L << 20) + (512 << 10) + 512) + " 4096"));
    }
}
