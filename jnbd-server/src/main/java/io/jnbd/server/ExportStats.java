package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.prometheus.metrics.core.datapoints.CounterDataPoint;
import io.prometheus.metrics.core.datapoints.GaugeDataPoint;
import java.util.List;
import java.util.Locale;

/**
 * What the request path counts for one export, shared by every connection to it. Each counter is this export's
 * child of one of the server's metric families ({@link ServerStats}), looked up once when the stats are made, so
 * that a request only adds to counters already in hand: no label lookup, no allocation, no lock.
 */
final class ExportStats {
    /** A slot per command the spec defines (indexed by its NBD_CMD_ value), then one for any other. */
    private static final int OTHER = Nbd.CMD_BLOCK_STATUS + 1;

    private final String name;
    private final ServerStats server;
    private final CounterDataPoint[] requests = new CounterDataPoint[OTHER + 1];
    /** Null for the commands that neither move nor cover bytes. */
    private final CounterDataPoint[] bytes = new CounterDataPoint[OTHER + 1];
    private final CounterDataPoint splitReads;
    private final CounterDataPoint splitReadChunks;
    private final CounterDataPoint splitWrites;
    private final CounterDataPoint merges;
    private final CounterDataPoint mergedRequests;
    private final GaugeDataPoint connections;
    /** Time in each of {@link ServerStats#STATES}, in that order. */
    final LatencyBuckets[] times = new LatencyBuckets[ServerStats.STATES.size()];

    ExportStats(String name, ServerStats server) {
        this.name = name;
        this.server = server;
        for (int type = 0; type <= OTHER; type++) {
            requests[type] = server.requests.labelValues(name, command(type));
        }
        for (int type : List.of(Nbd.CMD_READ, Nbd.CMD_WRITE, Nbd.CMD_TRIM, Nbd.CMD_WRITE_ZEROES, Nbd.CMD_CACHE)) {
            bytes[type] = server.bytes.labelValues(name, command(type));
        }
        splitReads = server.splitReads.labelValues(name);
        splitReadChunks = server.splitReadChunks.labelValues(name);
        splitWrites = server.splitWrites.labelValues(name);
        merges = server.merges.labelValues(name);
        mergedRequests = server.mergedRequests.labelValues(name);
        connections = server.exportConnections.labelValues(name);
        for (int s = 0; s < times.length; s++) times[s] = new LatencyBuckets();
    }

    /** The command label: the spec's name in lower case (read, write_zeroes, block_status...), or "other". */
    static String command(int type) {
        return type >= 0 && type < OTHER ? Nbd.commandName(type).toLowerCase(Locale.ROOT) : "other";
    }

    String name() {
        return name;
    }

    void request(int type) {
        requests[type >= 0 && type < OTHER ? type : OTHER].inc();
    }

    /** Block data read or written, or the range a trim, zero or cache covered. */
    void bytes(int type, long n) {
        CounterDataPoint c = bytes[type];
        if (c != null) c.inc(n);
    }

    /** Errors are rare and their replies allocate anyway: the errno's child is looked up here. */
    void error(int errno) {
        server.errors.labelValues(name, Nbd.errorName(errno)).inc();
    }

    void splitRead(int chunks) {
        splitReads.inc();
        splitReadChunks.inc(chunks);
    }

    void splitWrite() {
        splitWrites.inc();
    }

    /** A disk operation that served {@code requests} adjacent requests at once. */
    void merged(int requests) {
        merges.inc();
        mergedRequests.inc(requests);
    }

    void connected() {
        connections.inc();
    }

    void disconnected() {
        connections.dec();
    }

    void completed(ServerStats.Timing t, long now) {
        server.completed(this, t, now);
    }

    long requests() {
        long n = 0;
        for (CounterDataPoint c : requests) n += c.getLongValue();
        return n;
    }

    long bytes(int type) {
        CounterDataPoint c = bytes[type];
        return c == null ? 0 : c.getLongValue();
    }
}
