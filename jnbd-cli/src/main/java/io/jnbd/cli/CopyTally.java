package io.jnbd.cli;

import java.util.NoSuchElementException;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * How far a copy got, kept by the threads that start and finish its chunks: the bytes copied, the first
 * failure, and the prefix of the disk copied without a gap. Chunks finish out of order (many are in flight), so
 * the bytes copied alone do not say which part of the destination can be trusted after a failure or an
 * interruption; the prefix does.
 */
final class CopyTally {
    private final long size;
    /** What is counted: "bytes", or "dirty bytes" for an incremental copy, whose total is the dirty ones. */
    private final String unit;
    private final AtomicLong copied = new AtomicLong();
    /** Offsets of the chunks started and not yet finished. */
    private final ConcurrentSkipListSet<Long> inFlight = new ConcurrentSkipListSet<>();
    /** The end of the last chunk started; chunks start in ascending order. */
    private volatile long startedTo;
    private final AtomicReference<Throwable> failure = new AtomicReference<>();
    private volatile long failedAt = -1;

    CopyTally(long size) {
        this(size, "bytes");
    }

    CopyTally(long total, String unit) {
        this.size = total;
        this.unit = unit;
    }

    /** Before the chunk's first request is sent. */
    void started(long offset, long length) {
        inFlight.add(offset);
        startedTo = offset + length;
    }

    /** When the chunk's last request is answered; keeps only the first failure. */
    void finished(long offset, long length, Throwable error) {
        if (error == null) {
            copied.addAndGet(length);
        } else if (failure.compareAndSet(null, error)) {
            failedAt = offset;
        }
        inFlight.remove(offset);
    }

    long copied() {
        return copied.get();
    }

    Throwable failure() {
        return failure.get();
    }

    long failedAt() {
        return failedAt;
    }

    /** Every byte below this offset is copied. */
    long prefix() {
        long bound = startedTo; // read first: a chunk started after this read lies at or above it
        try {
            bound = Math.min(bound, inFlight.first());
        } catch (NoSuchElementException none) {
            // nothing in flight
        }
        long f = failedAt;
        return f >= 0 ? Math.min(bound, f) : bound;
    }

    /**
     * "copied N of SIZE bytes (P%) from A to B; the first X bytes are complete" ("of D dirty bytes" for an
     * incremental copy: X is still an offset on the disk, below which every dirty byte is copied).
     */
    String howFar(String from, String to) {
        long complete = prefix(); // before the count, which only grows: never more complete than copied
        long n = copied.get();
        return "copied " + n + " of " + size + " " + unit + " (" + Sizes.percent(n, size) + ") from " + from + " to " + to
            + "; the first " + complete + " bytes are complete";
    }
}
