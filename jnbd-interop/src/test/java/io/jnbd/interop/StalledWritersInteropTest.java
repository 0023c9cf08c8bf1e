package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Issue 17's first defect, as its reporter ran it: N connections each announce a 32 MiB write and send 1 KiB
 * of it. Eight of them used to take the whole buffer budget and hang every other client. Now a client that
 * connected before them keeps writing and reading, and a new nbdinfo is answered, both while the stalled
 * connections are all still open; they hold none of the budget, and after the receive timeout they are
 * dropped and the server is back to nothing in use.
 */
@Timeout(300)
class StalledWritersInteropTest {
    /** Long enough that everything the normal clients do happens while the stallers are still connected. */
    private static final Duration RECEIVE_TIMEOUT = Duration.ofSeconds(6);
    private static final int CLAIMED = 32 << 20;
    private static final int SENT = 1024;
    private static final int OPS = 200;

    @TempDir
    Path dir;
    NbdServer server;
    final List<RawNbdClient> stalled = new ArrayList<>();

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
        Interop.requireCommands("nbdinfo");
    }

    @AfterEach
    void tearDown() throws IOException {
        for (RawNbdClient s : stalled) s.close();
        if (server != null) server.stop(Duration.ofSeconds(10));
    }

    @ParameterizedTest(name = "{1} stalled writers on a {0} export")
    @CsvSource({"cached, 8", "cached, 64", "direct, 8", "direct, 64", "memory, 8", "memory, 64"})
    void stalledWritersNeitherStarveOthersNorKeepTheBudget(String kind, int n) throws Exception {
        String spec = switch (kind) {
            case "memory" -> "memory:256M";
            case "direct" -> "file:" + dir.resolve("d.img") + ",size=256M,mode=direct";
            default -> "file:" + dir.resolve("c.img") + ",size=256M";
        };
        Export export = ExportSpec.parse("e", spec).openExport();
        server = new NbdServer(new Exports(List.of(export), null), ServerConfig.defaults().withReceiveTimeout(RECEIVE_TIMEOUT));
        int port = ((InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0))).getPort();
        URI uri = URI.create("nbd://127.0.0.1:" + port + "/e");

        try (NbdClient normal = NbdClient.connect(uri, ClientOptions.defaults().withRequestTimeout(Duration.ofSeconds(30)))) {
            long[] alone = latencies(normal, 1);

            for (int i = 0; i < n; i++) stalled.add(stall(port));
            awaitConnections(n + 1);
            long stalledAt = System.nanoTime();

            long[] beside = latencies(normal, 2);
            Interop.Result info = Interop.run(Duration.ofSeconds(15), dir, "nbdinfo", uri.toString());
            info.assertSuccess();
            assertThat(info.output()).contains("export-size: " + (256L << 20));
            assertThat(server.connectionCount()).as("all of this while every stalled writer was still connected")
                .isEqualTo(n + 1);
            // They sent a header and 1 KiB: no piece of any payload is whole, so nothing is leased for them.
            assertThat(server.bufferBytesInUse()).as("buffer bytes held by the stalled writers").isZero();
            System.out.printf("%s export, %d stalled writers: 4 KiB write+read p50/p99 alone %d/%d µs, beside them %d/%d µs%n",
                kind, n, alone[OPS / 2] / 1000, alone[OPS * 99 / 100] / 1000, beside[OPS / 2] / 1000, beside[OPS * 99 / 100] / 1000);

            for (RawNbdClient s : stalled) assertThat(s.closedByPeer()).as("stalled writer dropped").isTrue();
            assertThat(Duration.ofNanos(System.nanoTime() - stalledAt)).as("dropped, but not before the receive timeout")
                .isGreaterThanOrEqualTo(RECEIVE_TIMEOUT.minusMillis(500));
            awaitConnections(1);
            assertThat(server.bufferBytesInUse()).isZero();
            latencies(normal, 3); // and the normal client is still served
        }
    }

    /** A connection that announces a 32 MiB write, sends 1 KiB of it and nothing more. */
    private static RawNbdClient stall(int port) throws IOException {
        RawNbdClient c = RawNbdClient.open(port, "e");
        c.out.writeInt(RawNbdClient.REQUEST_MAGIC);
        c.out.writeShort(0);
        c.out.writeShort(RawNbdClient.CMD_WRITE);
        c.out.writeLong(1);
        c.out.writeLong(0);
        c.out.writeInt(CLAIMED);
        c.out.write(new byte[SENT]);
        c.out.flush();
        return c;
    }

    /** {@link #OPS} 4 KiB writes each read back, at QD1; returns each request's time in nanoseconds, sorted. */
    private static long[] latencies(NbdClient client, long seed) throws IOException {
        Random random = new Random(seed);
        long[] times = new long[OPS];
        ByteBuffer data = ByteBuffer.allocateDirect(4096), back = ByteBuffer.allocateDirect(4096);
        byte[] bytes = new byte[4096];
        for (int i = 0; i < OPS; i += 2) {
            long offset = random.nextInt(1 << 16) * 4096L;
            random.nextBytes(bytes);
            data.clear().put(bytes).flip();
            long t = System.nanoTime();
            client.blocking().write(offset, data, false);
            times[i] = System.nanoTime() - t;
            back.clear();
            t = System.nanoTime();
            client.blocking().read(offset, back);
            times[i + 1] = System.nanoTime() - t;
            byte[] got = new byte[4096];
            back.flip().get(got);
            assertThat(Arrays.equals(got, bytes)).as("4 KiB at %d reads back", offset).isTrue();
        }
        Arrays.sort(times);
        return times;
    }

    private void awaitConnections(int count) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (server.connectionCount() != count && System.nanoTime() < deadline) Thread.sleep(10);
        assertThat(server.connectionCount()).isEqualTo(count);
    }
}
