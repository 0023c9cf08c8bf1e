package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.prometheus.metrics.core.datapoints.CounterDataPoint;
import io.prometheus.metrics.core.metrics.Counter;
import io.prometheus.metrics.core.metrics.Gauge;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import io.prometheus.metrics.model.snapshots.HistogramSnapshot;
import io.prometheus.metrics.model.snapshots.Labels;
import io.prometheus.metrics.model.snapshots.MetricSnapshot;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.HdrHistogram.Histogram;
import org.HdrHistogram.Recorder;

/**
 * The server's statistics, in one place for both of their readers: the metrics endpoint ({@link MetricsEndpoint})
 * and the {@code --stats-interval} log line. The request path counts each thing once, into its export's
 * {@link ExportStats}; the log line's throughput is read back from those same counters.
 *
 * <p>Request times have two forms because their readers want different things. The endpoint's are cumulative
 * buckets per export ({@link LatencyBuckets}); the log line's are server-wide HdrHistogram recorders, which give
 * exact percentiles for each interval and swap histograms without stopping the threads that record. Each is
 * recorded only while someone reads it, so a server with neither pays nothing for timing.
 */
public final class ServerStats {
    /**
     * The states a request passes through (the thesis' STATE_INIT / READ / SEND breakdown): waiting (received
     * until a disk operation starts), disk (the backend call), sending (reply queued until it is on the wire),
     * and total. A request that skips a state (a read sent by sendfile has no disk operation of its own) is
     * not counted in it.
     */
    static final List<String> STATES = List.of("waiting", "disk", "sending", "total");
    private static final int WAITING = 0, DISK = 1, SENDING = 2, TOTAL = 3;
    private static final int TO_LOG = 1, TO_ENDPOINT = 2;
    private static final long MAX_MICROS = 60_000_000L;

    final Counter requests = counter("jnbd_requests", "Requests received in the transmission phase, by NBD command", "export", "command");
    final Counter bytes = counter("jnbd_bytes", "Block data read or written, and the range a trim, write_zeroes or "
        + "cache covered, counted when the backend has done it", "export", "command");
    final Counter errors = counter("jnbd_errors", "Requests answered with an error, by NBD errno", "export", "errno");
    final Counter splitReads = counter("jnbd_split_reads", "Reads split into chunks that are read in parallel and "
        + "sent as each arrives", "export");
    final Counter splitReadChunks = counter("jnbd_split_read_chunks", "Chunks of split reads", "export");
    final Counter splitWrites = counter("jnbd_split_writes", "Writes whose payload went to the disk chunk by chunk as "
        + "it arrived", "export");
    final Counter merges = counter("jnbd_merges", "Disk operations that served several adjacent requests at once "
        + "(scheduler=sorted)", "export");
    final Counter mergedRequests = counter("jnbd_merged_requests", "Requests served by a merged disk operation", "export");
    final Gauge exportConnections = Gauge.builder().name("jnbd_export_connections")
        .help("Connections in the transmission phase on the export").labelNames("export").withoutExemplars().build();
    private final Counter refused = counter("jnbd_connections_refused", "Connections refused: limit (over "
        + "--max-connections, told so in the handshake), flood (closed at once: too many being told already)", "reason");
    private final CounterDataPoint refusedLimit = refused.labelValues("limit");
    private final CounterDataPoint refusedFlood = refused.labelValues("flood");

    private final Map<String, ExportStats> exports = new ConcurrentHashMap<>();
    /** Which readers want request times: TO_LOG, TO_ENDPOINT. */
    private volatile int timesWanted;

    private final Recorder[] recorders = new Recorder[STATES.size()];
    private long lastRequests;
    private long lastRead;
    private long lastWritten;

    public ServerStats() {
        for (int s = 0; s < recorders.length; s++) recorders[s] = new Recorder(MAX_MICROS, 2);
    }

    /** The times of one request, in System.nanoTime(); zero where a state was skipped. */
    static final class Timing {
        final long received;
        long diskStart;
        long diskEnd;
        long queued;

        Timing(long received) {
            this.received = received;
        }
    }

    private static Counter counter(String name, String help, String... labels) {
        return Counter.builder().name(name).help(help).labelNames(labels).withoutExemplars().build();
    }

    /** The stats of the export called {@code name}; a connection looks them up once, when it enters transmission. */
    ExportStats export(String name) {
        return exports.computeIfAbsent(name, n -> new ExportStats(n, this));
    }

    /** An export that no longer exists: its series leave the scrape and its counters the log line. */
    synchronized void forget(String name) {
        ExportStats gone = exports.remove(name);
        if (gone == null) return;
        // The log line's rates are differences of sums over the exports: what this one counted leaves both, so
        // the interval keeps its part of it.
        lastRequests -= gone.requests();
        lastRead -= gone.bytes(Nbd.CMD_READ);
        lastWritten -= gone.bytes(Nbd.CMD_WRITE);
        for (var family : List.of(requests, bytes, errors, splitReads, splitReadChunks, splitWrites, merges,
                mergedRequests, exportConnections)) {
            family.removeIf(labels -> labels.getFirst().equals(name));
        }
    }

    void refusedAtLimit() {
        refusedLimit.inc();
    }

    void refusedInFlood() {
        refusedFlood.inc();
    }

    void completed(ExportStats export, Timing t, long now) {
        int wanted = timesWanted;
        if (wanted == 0) return;
        if (t.diskStart != 0) {
            time(export, WAITING, t.diskStart - t.received, wanted);
            time(export, DISK, t.diskEnd - t.diskStart, wanted);
        }
        if (t.queued != 0) time(export, SENDING, now - t.queued, wanted);
        time(export, TOTAL, now - t.received, wanted);
    }

    private void time(ExportStats export, int state, long nanos, int wanted) {
        if ((wanted & TO_ENDPOINT) != 0) export.times[state].record(nanos);
        if ((wanted & TO_LOG) != 0) recorders[state].recordValue(Math.min(MAX_MICROS, Math.max(0, nanos / 1000)));
    }

    private synchronized void want(int reader) {
        timesWanted |= reader;
    }

    /** Adds every export's counters and request times to {@code registry}; times are recorded from now on. */
    void register(PrometheusRegistry registry) {
        for (var family : List.of(requests, bytes, errors, splitReads, splitReadChunks, splitWrites, merges, mergedRequests,
                exportConnections, refused)) {
            registry.register(family);
        }
        registry.register(this::requestTimes);
        want(TO_ENDPOINT);
    }

    private MetricSnapshot requestTimes() {
        var family = HistogramSnapshot.builder().name("jnbd_request_seconds")
            .help("Time requests spent in each state: waiting (received until the disk operation starts), disk, "
                + "sending (reply queued until it is on the wire), total");
        for (ExportStats e : exports.values()) {
            for (int s = 0; s < STATES.size(); s++) {
                family.dataPoint(e.times[s].snapshot(Labels.of("export", e.name(), "state", STATES.get(s))));
            }
        }
        return family.build();
    }

    /**
     * A line per state with the interval's percentiles, then throughput; starts the next interval. The first
     * call starts the recording of request times for these lines.
     */
    public synchronized String report(double seconds) {
        want(TO_LOG);
        long reqs = 0, rd = 0, wr = 0;
        for (ExportStats e : exports.values()) {
            reqs += e.requests();
            rd += e.bytes(Nbd.CMD_READ);
            wr += e.bytes(Nbd.CMD_WRITE);
        }
        StringBuilder sb = new StringBuilder();
        sb.append(String.format("%.0f req/s, read %.1f MB/s, written %.1f MB/s", (reqs - lastRequests) / seconds,
            (rd - lastRead) / seconds / 1e6, (wr - lastWritten) / seconds / 1e6));
        lastRequests = reqs;
        lastRead = rd;
        lastWritten = wr;
        for (int s = 0; s < STATES.size(); s++) line(sb, STATES.get(s), recorders[s].getIntervalHistogram());
        return sb.toString();
    }

    private static void line(StringBuilder sb, String name, Histogram h) {
        sb.append(String.format("%n  %-8s n=%-8d p50=%6dus p99=%7dus max=%8dus", name, h.getTotalCount(),
            h.getValueAtPercentile(50), h.getValueAtPercentile(99), h.getMaxValue()));
    }
}
