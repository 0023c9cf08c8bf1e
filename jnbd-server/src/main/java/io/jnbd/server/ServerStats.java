package io.jnbd.server;

import java.util.concurrent.atomic.LongAdder;
import org.HdrHistogram.Histogram;
import org.HdrHistogram.Recorder;

/**
 * Server-wide request timing, split into the states each request passes through (the thesis' STATE_INIT /
 * READ / SEND breakdown): waiting (received until a disk operation starts), disk (the backend call),
 * sending (reply queued until it is on the wire), and total. Recorders let an interval report swap
 * histograms without stopping the threads that record.
 */
public final class ServerStats {
    private static final long MAX_MICROS = 60_000_000L;

    final Recorder waiting = new Recorder(MAX_MICROS, 2);
    final Recorder disk = new Recorder(MAX_MICROS, 2);
    final Recorder sending = new Recorder(MAX_MICROS, 2);
    final Recorder total = new Recorder(MAX_MICROS, 2);
    final LongAdder bytesRead = new LongAdder();
    final LongAdder bytesWritten = new LongAdder();
    final LongAdder requests = new LongAdder();

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

    void complete(Timing t, long now) {
        requests.increment();
        if (t.diskStart != 0) {
            record(waiting, t.diskStart - t.received);
            record(disk, t.diskEnd - t.diskStart);
        }
        if (t.queued != 0) record(sending, now - t.queued);
        record(total, now - t.received);
    }

    private static void record(Recorder r, long nanos) {
        r.recordValue(Math.min(MAX_MICROS, Math.max(0, nanos / 1000)));
    }

    /** A line per state with the interval's percentiles, then throughput; resets the interval. */
    public String report(double seconds) {
        StringBuilder sb = new StringBuilder();
        long reqs = requests.sumThenReset();
        long rd = bytesRead.sumThenReset(), wr = bytesWritten.sumThenReset();
        sb.append(String.format("%.0f req/s, read %.1f MB/s, written %.1f MB/s", reqs / seconds, rd / seconds / 1e6, wr / seconds / 1e6));
        line(sb, "waiting", waiting.getIntervalHistogram());
        line(sb, "disk", disk.getIntervalHistogram());
        line(sb, "sending", sending.getIntervalHistogram());
        line(sb, "total", total.getIntervalHistogram());
        return sb.toString();
    }

    private static void line(StringBuilder sb, String name, Histogram h) {
        sb.append(String.format("%n  %-8s n=%-8d p50=%6dus p99=%7dus max=%8dus", name, h.getTotalCount(),
            h.getValueAtPercentile(50), h.getValueAtPercentile(99), h.getMaxValue()));
    }
}
