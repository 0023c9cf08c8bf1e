package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Filters stacked in bin/jnbd serve's exports, seen by other programs' clients: qemu-io gets the error the error
 * filter injects, on exactly the requests it should, and nbdcopy copies correct bytes through a delay and a rate
 * limit.
 */
@Timeout(300)
class FilterInteropTest {

    private static final Duration T = Duration.ofSeconds(240);
    private static final long SIZE = 16L << 20;

    @TempDir
    static Path dir;
    static JnbdServer server;

    @BeforeAll
    static void startServer() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("qemu-io", "nbdcopy");
        server = JnbdServer.start(dir,
            "--export", "readerr=memory:16M,filter=error,error-pread=EIO,error-pread-rate=100%",
            "--export", "full=file:" + dir.resolve("full.img") + ",size=16M,filter=error,error=ENOSPC,error-pwrite-rate=1,"
                + "error-offset=1M,error-length=64K",
            "--export", "slow=file:" + dir.resolve("slow.img") + ",size=16M,filter=delay,delay-read=1ms,wdelay=1ms",
            "--export", "slowmem=memory:16M,filter=delay,delay-read=1ms,filter=error,error-rate=0",
            // 8 MiB/s with half a second of burst: most of a 16 MiB copy waits for the buckets, each way.
            "--export", "rated=file:" + dir.resolve("rated.img") + ",size=16M,filter=rate,rate=64M,connection-rate=128M,burstiness=0.5",
            "--export", "ratedmem=memory:16M,filter=rate,connection-rate=64M,burstiness=0.5");
    }

    @AfterAll
    static void stopServer() throws Exception {
        if (server != null) server.stop();
    }

    private static Interop.Result qemuIo(String export, String... commands) {
        var argv = new java.util.ArrayList<>(java.util.List.of("qemu-io", "-f", "raw", server.uri(export)));
        for (String c : commands) {
            argv.add("-c");
            argv.add(c);
        }
        return Interop.run(T, dir, argv);
    }

    @Test
    void qemuIoSeesTheInjectedReadError() {
        Interop.Result r = qemuIo("readerr", "write -P 0x5a 0 64k", "read 0 4k");
        assertThat(r.output()).as(r.toString()).contains("wrote 65536/65536 bytes").contains("Input/output error")
            .doesNotContain("read 4096/4096 bytes");
    }

    @Test
    void qemuIoGetsNoSpaceOnlyForWritesInTheRange() {
        Interop.Result before = qemuIo("full", "write -P 0x11 0 1M", "read -P 0x11 0 1M");
        assertThat(before.output()).as(before.toString()).contains("wrote 1048576/1048576 bytes", "read 1048576/1048576 bytes")
            .doesNotContainIgnoringCase("error");
        Interop.Result in = qemuIo("full", "write -P 0x22 1M 4k");
        assertThat(in.output()).as(in.toString()).contains("No space left on device");
        Interop.Result after = qemuIo("full", "write -P 0x33 1088k 4k", "read -P 0x33 1088k 4k", "read -P 0 1M 64k");
        assertThat(after.output()).as(after.toString()).contains("wrote 4096/4096 bytes", "read 4096/4096 bytes", "read 65536/65536 bytes")
            .doesNotContainIgnoringCase("error").doesNotContain("Pattern verification failed");
    }

    /** A pool's reads and writes are asynchronous: behind delay and error they stay so, and still pass both filters. */
    @Test
    void aPoolExportWorksBehindDelayAndError() throws Exception {
        try (PoolCluster cluster = new PoolCluster(dir.resolve("pool")).start("64M", "filter=delay", "rdelay=1ms", "wdelay=1ms",
                "filter=error", "error=ENOSPC", "error-pwrite-rate=100%", "error-offset=48M")) {
            Path source = dir.resolve("pool-src.img");
            Interop.writeRandomImage(source, SIZE, 12);
            Interop.run(T, dir, "nbdcopy", "--flush", source.toString(), cluster.uri()).assertSuccess();
            Path out = dir.resolve("pool-out.img");
            Files.deleteIfExists(out);
            Files.createFile(out);
            Interop.run(T, dir, "nbdcopy", cluster.uri(), out.toString()).assertSuccess();
            assertThat(Files.size(out)).isEqualTo(64L << 20);
            assertThat(Interop.readAt(out, 0, (int) SIZE)).as("the bytes copied in").isEqualTo(Files.readAllBytes(source));
            assertThat(Interop.readAt(out, SIZE, (int) SIZE)).as("never written").containsOnly(0);
            Interop.Result r = Interop.run(T, dir, "qemu-io", "-f", "raw", cluster.uri(), "-c", "write -P 0x44 48M 4k");
            assertThat(r.output()).as(r.toString()).contains("No space left on device");
        }
    }

    @Test
    void nbdcopyCopiesCorrectBytesThroughADelay() throws Exception {
        copiesCorrectBytes("slow", "slowmem");
    }

    /** A cached file (whose reads would leave by sendfile without the filter) and memory, each way through the buckets. */
    @Test
    void nbdcopyCopiesCorrectBytesThroughARateLimit() throws Exception {
        copiesCorrectBytes("rated", "ratedmem");
    }

    private static void copiesCorrectBytes(String... exports) throws Exception {
        Path source = dir.resolve("src.img");
        Interop.writeRandomImage(source, SIZE, 11);
        for (String export : exports) {
            Interop.run(T, dir, "nbdcopy", "--flush", source.toString(), server.uri(export)).assertSuccess();
            Path out = dir.resolve("out-" + export + ".img");
            Files.deleteIfExists(out);
            Files.createFile(out);
            Interop.run(T, dir, "nbdcopy", server.uri(export), out.toString()).assertSuccess();
            assertThat(Files.mismatch(source, out)).as("first differing byte of %s", out).isEqualTo(-1L);
            Files.delete(out);
        }
    }
}
