package io.jnbd.server;

import io.prometheus.metrics.model.snapshots.ClassicHistogramBuckets;
import io.prometheus.metrics.model.snapshots.HistogramSnapshot.HistogramDataPointSnapshot;
import io.prometheus.metrics.model.snapshots.Labels;
import java.util.concurrent.atomic.LongAdder;

/**
 * How long the requests of one export spent in one state, counted in fixed buckets from 10 µs to 10 s: a
 * Prometheus histogram. Not the library's Histogram, whose observe allocates and takes a striped atomic for its
 * scrape buffer on every call (prometheus-metrics-core 1.10); here a request costs two striped adds and
 * nothing else. The count is the sum of the buckets, so a scrape always sees the two agree.
 */
final class LatencyBuckets {
    /** Upper bounds in nanoseconds: 1-2.5-5 steps, fine enough to tell a page-cache hit from a disk read. */
    private static final long[] BOUNDS = {
        10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
        1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000,
        100_000_000, 250_000_000, 500_000_000, 1_000_000_000L, 2_500_000_000L, 5_000_000_000L, 10_000_000_000L};
    private static final double[] UPPER_SECONDS = new double[BOUNDS.length + 1];

    static {
        for (int i = 0; i < BOUNDS.length; i++) UPPER_SECONDS[i] = BOUNDS[i] / 1e9;
        UPPER_SECONDS[BOUNDS.length] = Double.POSITIVE_INFINITY;
    }

    private final LongAdder[] counts = new LongAdder[BOUNDS.length + 1];
    private final LongAdder sumNanos = new LongAdder();

    LatencyBuckets() {
        for (int i = 0; i < counts.length; i++) counts[i] = new LongAdder();
    }

    void record(long nanos) {
        long n = Math.max(0, nanos);
        int i = 0;
        while (i < BOUNDS.length && n > BOUNDS[i]) i++;
        counts[i].increment();
        sumNanos.add(n);
    }

    HistogramDataPointSnapshot snapshot(Labels labels) {
        long[] c = new long[counts.length];
        for (int i = 0; i < c.length; i++) c[i] = counts[i].sum();
        return HistogramDataPointSnapshot.builder()
            .classicHistogramBuckets(ClassicHistogramBuckets.of(UPPER_SECONDS, c))
            .sum(sumNanos.sum() / 1e9)
            .labels(labels)
            .build();
    }
}
