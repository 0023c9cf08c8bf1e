package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.backend.ReadOnlyFilter;
import io.prometheus.metrics.expositionformats.PrometheusTextFormatWriter;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.assertj.core.data.Offset;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * What /metrics shows of things a well-behaved client cannot make happen: errors by errno, refusals over the
 * connection limit, merged requests, and the bucket a request time falls in.
 */
@Timeout(60)
class MetricsEndpointTest {

    private static MetricsEndpoint endpoint(NbdServer server) throws Exception {
        MetricsEndpoint endpoint = MetricsEndpoint.bind(new InetSocketAddress("127.0.0.1", 0));
        endpoint.expose(server);
        return endpoint;
    }

    @Test
    void errorsAreCountedByTheirErrnoName() throws Exception {
        List<Export> exports = List.of(new Export("mem", "", new MemoryBackend(1 << 20)),
            new Export("ro", "", new ReadOnlyFilter(new MemoryBackend(1 << 20))));
        try (ServerFixture fx = new ServerFixture(exports); MetricsEndpoint endpoint = endpoint(fx.server)) {
            try (RawClient mem = fx.open("mem"); RawClient ro = fx.open("ro")) {
                assertThat(mem.readError(0, 1 << 20, 4096)).isEqualTo(Nbd.EINVAL);
                assertThat(mem.readError(0, 1 << 20, 4096)).isEqualTo(Nbd.EINVAL);
                assertThat(ro.write(0, new byte[4096], 0)).isEqualTo(Nbd.EPERM);
            }
            MetricsScrape s = MetricsScrape.of(endpoint.port());
            assertThat(s.value("jnbd_errors_total{errno=\"EINVAL\",export=\"mem\"}")).isEqualTo(2);
            assertThat(s.value("jnbd_errors_total{errno=\"EPERM\",export=\"ro\"}")).isEqualTo(1);
            assertThat(s.samples()).doesNotContainKey("jnbd_errors_total{errno=\"EPERM\",export=\"mem\"}");
            // Refused requests are still requests, and moved no bytes.
            assertThat(s.value("jnbd_requests_total{command=\"read\",export=\"mem\"}")).isEqualTo(2);
            assertThat(s.value("jnbd_requests_total{command=\"write\",export=\"ro\"}")).isEqualTo(1);
            assertThat(s.value("jnbd_bytes_total{command=\"read\",export=\"mem\"}")).isZero();
            assertThat(s.value("jnbd_bytes_total{command=\"write\",export=\"ro\"}")).isZero();
        }
    }

    @Test
    void anExportAReloadRemovedLeavesTheScrapeWhenItsLastClientHasGone() throws Exception {
        Export a = new Export("a", "", new MemoryBackend(1 << 20)), b = new Export("b", "", new MemoryBackend(1 << 20));
        var registry = new ReloadableExports(new Exports(List.of(a, b), null), java.time.Duration.ZERO);
        NbdServer server = new NbdServer(registry, ServerConfig.defaults());
        try (MetricsEndpoint endpoint = endpoint(server)) {
            var address = server.listen(new InetSocketAddress("127.0.0.1", 0));
            String bWrites = "jnbd_requests_total{command=\"write\",export=\"b\"}";
            try (RawClient onA = RawClient.open(address, "a"); RawClient onB = RawClient.open(address, "b")) {
                assertThat(onA.write(0, new byte[4096], 0)).isZero();
                assertThat(onB.write(0, new byte[4096], 0)).isZero();
                server.stats().report(1); // an interval of the stats log line starts here
                registry.replace(new Exports(List.of(a), null));
                assertThat(onB.write(4096, new byte[4096], 0)).isZero();
                assertThat(MetricsScrape.of(endpoint.port()).value(bWrites)).as("b while its client is on").isEqualTo(2);
                onB.disconnect();
            }
            long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(10);
            MetricsScrape s = MetricsScrape.of(endpoint.port());
            while (s.text().contains("export=\"b\"") && System.nanoTime() < deadline) {
                Thread.sleep(10);
                s = MetricsScrape.of(endpoint.port());
            }
            assertThat(s.text()).as("series of the removed export").doesNotContain("export=\"b\"");
            assertThat(s.value("jnbd_requests_total{command=\"write\",export=\"a\"}")).isEqualTo(1);
            assertThat(server.stats().report(1)).as("the interval: b's second write and its disconnect, nothing twice").startsWith("2 req/s");
        } finally {
            server.stop(java.time.Duration.ofSeconds(5));
        }
    }

    @Test
    void aClientOverTheConnectionLimitIsCountedAsRefused() throws Exception {
        List<RawClient> clients = new ArrayList<>();
        var config = ServerConfig.defaults().withMaxConnections(1).withOperatorSlots(0);
        try (ServerFixture fx = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(1 << 20))), config);
             MetricsEndpoint endpoint = endpoint(fx.server)) {
            clients.add(fx.open("mem"));
            RawClient over = RawClient.connect(fx.address);
            clients.add(over);
            over.greeting();
            over.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
            var go = over.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("mem", List.of())).getLast();
            assertThat(go.type()).isEqualTo(Nbd.REP_ERR_POLICY);

            MetricsScrape s = MetricsScrape.of(endpoint.port());
            assertThat(s.value("jnbd_connections_refused_total{reason=\"limit\"}")).isEqualTo(1);
            assertThat(s.value("jnbd_connections_refused_total{reason=\"flood\"}")).isZero();
            assertThat(s.value("jnbd_connections_open")).as("a refused client holds no slot").isEqualTo(1);
            assertThat(s.value("jnbd_export_connections{export=\"mem\"}")).isEqualTo(1);
        } finally {
            for (RawClient c : clients) c.close();
        }
    }

    @Test
    void adjacentRequestsMergedByTheSortedSchedulerAreCounted() {
        ServerStats server = new ServerStats();
        ConnectionStats stats = new ConnectionStats(server.export("disk"));
        var sorted = new BatchScheduler(BatchScheduler.Policy.SORTED, 8 << 20);
        // Three adjacent reads become one disk operation; the read far away stays alone.
        stats.planned(sorted.plan(List.of(read(8192), read(0), read(4096), read(1 << 20))));

        var registry = new PrometheusRegistry();
        server.register(registry);
        MetricsScrape s = MetricsScrape.parse(text(registry));
        assertThat(s.value("jnbd_merges_total{export=\"disk\"}")).isEqualTo(1);
        assertThat(s.value("jnbd_merged_requests_total{export=\"disk\"}")).isEqualTo(3);
    }

    @Test
    void requestTimesFallInTheFirstBucketThatHoldsThem() throws Exception {
        ServerStats server = new ServerStats();
        var registry = new PrometheusRegistry();
        server.register(registry);
        ConnectionStats stats = new ConnectionStats(server.export("x"));
        for (long micros : new long[] {5, 10, 11, 900, 2_000_000, 30_000_000}) {
            var t = new ServerStats.Timing(1_000);
            stats.completed(t, 1_000 + micros * 1000);
        }
        MetricsScrape s = MetricsScrape.parse(text(registry));
        String total = "jnbd_request_seconds_bucket{export=\"x\",state=\"total\",le=";
        assertThat(s.value(total + "\"1.0E-5\"}")).as("up to 10 us, the bound included").isEqualTo(2);
        assertThat(s.value(total + "\"0.001\"}")).isEqualTo(4);
        assertThat(s.value(total + "\"2.5\"}")).isEqualTo(5);
        assertThat(s.value(total + "\"10.0\"}")).isEqualTo(5);
        assertThat(s.value(total + "\"+Inf\"}")).isEqualTo(6);
        assertThat(s.value("jnbd_request_seconds_count{export=\"x\",state=\"total\"}")).isEqualTo(6);
        assertThat(s.value("jnbd_request_seconds_sum{export=\"x\",state=\"total\"}")).isCloseTo(32.000926, Offset.offset(1e-9));
        // Without a disk operation or a queued reply, those states are not counted.
        assertThat(s.value("jnbd_request_seconds_count{export=\"x\",state=\"disk\"}")).isZero();
        assertThat(s.value("jnbd_request_seconds_count{export=\"x\",state=\"sending\"}")).isZero();
    }

    @Test
    void theStatsLogLineReadsTheCountersTheEndpointShows() {
        ServerStats server = new ServerStats();
        server.report(1); // starts the first interval
        ConnectionStats a = new ConnectionStats(server.export("a"));
        ConnectionStats b = new ConnectionStats(server.export("b"));
        a.request(Nbd.CMD_READ);
        a.read(3_000_000);
        b.request(Nbd.CMD_WRITE);
        b.written(1_000_000);
        assertThat(server.report(2)).startsWith("1 req/s, read 1.5 MB/s, written 0.5 MB/s");
        assertThat(server.report(2)).as("the next interval starts from zero").startsWith("0 req/s, read 0.0 MB/s, written 0.0 MB/s");
    }

    private static Request read(long offset) {
        return new Request(0, Nbd.CMD_READ, offset, offset, 4096);
    }

    /** What a scrape of {@code registry} would return, without the HTTP. */
    private static String text(PrometheusRegistry registry) {
        var out = new ByteArrayOutputStream();
        try {
            PrometheusTextFormatWriter.create().write(out, registry.scrape());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out.toString(StandardCharsets.UTF_8);
    }
}
