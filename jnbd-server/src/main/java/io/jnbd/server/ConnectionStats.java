package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import java.util.List;
import java.util.concurrent.atomic.LongAdder;

/**
 * What the request path counts, for one connection in transmission: the one place it counts. Each count goes to
 * the export's {@link ExportStats} (which the metrics endpoint and the stats log line read), and the connection
 * keeps its own totals for the line that logs its end.
 */
final class ConnectionStats {
    private final ExportStats export;
    private final LongAdder requests = new LongAdder();
    private final LongAdder bytesRead = new LongAdder();
    private final LongAdder bytesWritten = new LongAdder();
    private final LongAdder errors = new LongAdder();

    /** Counts the connection among the export's until {@link #closed()}. */
    ConnectionStats(ExportStats export) {
        this.export = export;
        export.connected();
    }

    void closed() {
        export.disconnected();
    }

    /** A request received, of NBD command {@code type}. */
    void request(int type) {
        requests.increment();
        export.request(type);
    }

    void read(long bytes) {
        bytesRead.add(bytes);
        export.bytes(Nbd.CMD_READ, bytes);
    }

    void written(long bytes) {
        bytesWritten.add(bytes);
        export.bytes(Nbd.CMD_WRITE, bytes);
    }

    /** A disk operation done: counts the range of a trim, zero or cache (reads and writes count where data moves). */
    void covered(int type, long bytes) {
        if (type == Nbd.CMD_TRIM || type == Nbd.CMD_WRITE_ZEROES || type == Nbd.CMD_CACHE) export.bytes(type, bytes);
    }

    void error(int errno) {
        errors.increment();
        export.error(errno);
    }

    void splitRead(int chunks) {
        export.splitRead(chunks);
    }

    void splitWrite() {
        export.splitWrite();
    }

    /** Counts the operations of a batch's plan that merged requests. */
    void planned(BatchScheduler.Plan plan) {
        List<BatchScheduler.Op> ops = plan.ops();
        for (int i = 0; i < ops.size(); i++) { // no iterator: this runs for every batch
            int members = ops.get(i).members().size();
            if (members > 1) export.merged(members);
        }
    }

    /** The last part of a request's reply is on the wire. */
    void completed(ServerStats.Timing timing, long now) {
        export.completed(timing, now);
    }

    @Override
    public String toString() {
        return requests.sum() + " requests, " + bytesRead.sum() + " bytes read, " + bytesWritten.sum()
            + " bytes written, " + errors.sum() + " errors";
    }
}
