package io.jnbd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.client.NbdClient;
import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.MetricsEndpoint;
import io.jnbd.server.MetricsScrape;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The metrics endpoint as jnbd serve --metrics wires it, scraped over HTTP before and after I/O done with jnbd's
 * own client: every counter moves by exactly the requests and bytes the client sent, on a memory export that
 * splits its reads and on a cached file export whose reads leave by sendfile.
 */
@Timeout(120)
class MetricsTest {
    private static final int MIB = 1 << 20;

    @ParameterizedTest(name = "export {0}")
    @ValueSource(strings = {"mem", "disk"})
    void countersMoveByExactlyWhatTheClientDid(String name, @TempDir Path dir) throws Exception {
        List<Export> exports = List.of(ExportSpec.parse("mem=memory:64M,split=256K,chunk=64K").openExport(),
            ExportSpec.parse("disk=file:" + dir.resolve("disk.img") + ",size=64M").openExport());
        try (NbdServer server = new NbdServer(new Exports(exports, "mem"), ServerConfig.defaults());
             MetricsEndpoint endpoint = MetricsEndpoint.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))) {
            endpoint.expose(server);
            int port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))).getPort();
            MetricsScrape before = MetricsScrape.of(endpoint.port());

            byte[] data = new byte[8 * MIB];
            new Random(16).nextBytes(data);
            ByteBuffer back = ByteBuffer.allocate(data.length);
            try (NbdClient client = NbdClient.connect("nbd://127.0.0.1:" + port + "/" + name)) {
                for (int i = 0; i < 8; i++) client.write((long) i * MIB, ByteBuffer.wrap(data, i * MIB, MIB), false).join();
                for (int i = 0; i < 8; i++) client.read((long) i * MIB, back.slice(i * MIB, MIB)).join();
                client.flush().join();
                client.trim(16L * MIB, MIB, false).join();
                client.writeZeroes(20L * MIB, 2 * MIB, false, false, false).join();
            }
            assertThat(back.array()).isEqualTo(data);
            // A request is counted when it is received and its bytes when the disk has done them, both before
            // its reply leaves; its time only once the reply is on the wire, which may be after the client has it.
            String total = "jnbd_request_seconds_count{export=\"" + name + "\",state=\"total\"}";
            MetricsScrape after = awaitSample(endpoint.port(), total, before.value(total) + 8 + 8 + 3);

            Delta d = new Delta(before, after, name);
            assertThat(d.of("jnbd_requests_total", "command", "write")).isEqualTo(8);
            assertThat(d.of("jnbd_requests_total", "command", "read")).isEqualTo(8);
            assertThat(d.of("jnbd_requests_total", "command", "flush")).isEqualTo(1);
            assertThat(d.of("jnbd_requests_total", "command", "trim")).isEqualTo(1);
            assertThat(d.of("jnbd_requests_total", "command", "write_zeroes")).isEqualTo(1);
            assertThat(d.of("jnbd_requests_total", "command", "disc")).isEqualTo(1);
            assertThat(d.of("jnbd_requests_total", "command", "block_status")).isZero();
            assertThat(d.of("jnbd_bytes_total", "command", "write")).isEqualTo(8 * MIB);
            assertThat(d.of("jnbd_bytes_total", "command", "read")).isEqualTo(8 * MIB);
            assertThat(d.of("jnbd_bytes_total", "command", "trim")).isEqualTo(MIB);
            assertThat(d.of("jnbd_bytes_total", "command", "write_zeroes")).isEqualTo(2 * MIB);
            // The memory export splits each 1 MiB read into 16 chunks of 64K; the file's reads go whole by sendfile.
            boolean splits = name.equals("mem");
            assertThat(d.of("jnbd_split_reads_total")).isEqualTo(splits ? 8 : 0);
            assertThat(d.of("jnbd_split_read_chunks_total")).isEqualTo(splits ? 8 * 16 : 0);
            assertThat(after.samples()).doesNotContainKeys("jnbd_errors_total{errno=\"EIO\",export=\"" + name + "\"}");
            String other = name.equals("mem") ? "disk" : "mem";
            assertThat(new Delta(before, after, other).of("jnbd_requests_total", "command", "read"))
                .as("the other export's counters").isZero();
        }
    }

    /** Scrapes until {@code series} reaches {@code expected} (or 10 s pass), then asserts it has exactly that. */
    private static MetricsScrape awaitSample(int port, String series, double expected) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        MetricsScrape s = MetricsScrape.of(port);
        while (s.value(series) < expected && System.nanoTime() < deadline) {
            Thread.sleep(10);
            s = MetricsScrape.of(port);
        }
        assertThat(s.value(series)).as(series).isEqualTo(expected);
        return s;
    }

    /** How far one export's series moved between two scrapes. */
    private record Delta(MetricsScrape before, MetricsScrape after, String export) {
        double of(String name, String label, String value) {
            return change(name + "{" + label + "=\"" + value + "\",export=\"" + export + "\"}");
        }

        double of(String name) {
            return change(name + "{export=\"" + export + "\"}");
        }

        private double change(String series) {
            return after.value(series) - before.value(series);
        }
    }
}
