package io.jnbd.cli;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;

import static org.assertj.core.api.Assertions.assertThat;

/** {@code jnbd copy --reconnect-delay}: an upload that rides out its server's crash and restart. */
@Timeout(120)
class CopyReconnectTest {

    @Test
    void anUploadCompletesAcrossACrashOfTheServerAndTheDataVerifies(@TempDir Path dir) throws Exception {
        Path source = dir.resolve("src.img");
        byte[] data = new byte[16 << 20];
        new Random(36).nextBytes(data);
        Files.write(source, data);
        Path image = dir.resolve("disk.img");
        // Slow writes, so that the copy is still under way when the server goes.
        String spec = "disk=file:" + image + ",size=16M,filter=delay,delay-write=50ms";
        NbdServer first = serve(spec, 0);
        int port = ((InetSocketAddress) first.boundAddresses().getFirst()).getPort();
        String uri = "nbd://127.0.0.1:" + port + "/disk";
        CompletableFuture<Run> copy = CompletableFuture.supplyAsync(() -> Run.jnbd("copy", "--no-progress",
            "--connections", "2", "--requests", "4", "--request-size", "65536", "--reconnect-delay", "60",
            source.toString(), uri));
        NbdServer second = null;
        try {
            while (!startsWith(image, data, 1 << 20) && !copy.isDone()) Thread.sleep(5);
            assertThat(copy).as("the copy is still under way when the server crashes").isNotDone();
            first.stop(Duration.ZERO);
            second = serve(spec, port);
            Run r = copy.join();
            assertThat(r.exit()).as(r.toString()).isZero();
            assertThat(Run.jnbd("cmp", source.toString(), uri).exit()).isZero();
        } finally {
            first.stop(Duration.ZERO);
            if (second != null) second.stop(Duration.ZERO);
        }
    }

    @Test
    void aNegativeDelayIsAUsageError() {
        Run r = Run.jnbd("bench", "--reconnect-delay", "-1", "nbd://127.0.0.1:1/x");
        assertThat(r.exit()).isEqualTo(2);
        assertThat(r.err()).contains("--reconnect-delay must be between 0 and 86400 seconds");
        assertThat(Run.jnbd("copy", "--help").out()).contains("--reconnect-delay=SECONDS");
        assertThat(Run.jnbd("bench", "--help").out()).contains("--reconnect-delay=SECONDS");
    }

    /** Whether the file's first {@code n} bytes are those of {@code data}. */
    private static boolean startsWith(Path file, byte[] data, int n) throws java.io.IOException {
        try (var in = Files.newInputStream(file)) {
            return java.util.Arrays.equals(in.readNBytes(n), 0, n, data, 0, n);
        }
    }

    private static NbdServer serve(String spec, int port) throws Exception {
        NbdServer server = new NbdServer(new Exports(List.of(ExportSpec.parse(spec).openExport()), "disk"), ServerConfig.defaults());
        server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
        return server;
    }
}
