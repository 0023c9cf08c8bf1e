package io.jnbd.server.filter;

/**
 * A token bucket of bits, told the time by its caller (so that tests step a clock of their own). It fills at its rate
 * up to {@code burstiness} seconds of it, and starts full, as nbdkit's does. A request takes its bits at once, even
 * more than the bucket holds: the level then goes below zero, and the request waits until the bucket would be back
 * at zero. So a request's wait is known when it arrives (an asynchronous one is scheduled once, holding no thread),
 * requests are let through in the order they arrived, and over any stretch of time no more passes than the burst plus
 * the rate times that time: the average is exact however large the requests. nbdkit takes what the bucket holds and
 * sleeps for the rest, in a loop; the long-run rate is the same.
 *
 * <p>Thread-safe: every call holds the bucket's lock for a few arithmetic operations.
 */
final class TokenBucket {
    private static final double NANOS_PER_SECOND = 1e9;

    private final double burstiness;
    /** Bits per second; 0 is no limit (a rate file may say so, as nbdkit's may). */
    private long rate;
    /** Bits; below zero while the requests let through are still being paid for. */
    private double level;
    private long stamp;
    private long bitsTaken;

    /** A full bucket at {@code now} (nanoseconds, any origin the caller keeps to). */
    TokenBucket(long rate, double burstiness, long now) {
        if (rate < 0) throw new IllegalArgumentException("rate " + rate);
        this.burstiness = burstiness;
        this.rate = rate;
        this.level = capacity(rate);
        this.stamp = now;
    }

    private double capacity(long r) {
        return r * burstiness;
    }

    /**
     * Takes {@code bits} at {@code now}, first changing the rate to {@code rate} if it changed (the level kept, and
     * cut to the new capacity, as nbdkit cuts it); returns how many nanoseconds the request waits before it passes.
     */
    synchronized long take(long bits, long rate, long now) {
        bitsTaken += bits;
        refill(now);
        if (rate != this.rate) {
            this.rate = rate;
            level = Math.min(level, capacity(rate));
        }
        if (rate == 0) {
            level = 0;
            return 0;
        }
        level -= bits;
        return level >= 0 ? 0 : (long) Math.ceil(-level * NANOS_PER_SECOND / rate);
    }

    private void refill(long now) {
        long elapsed = now - stamp;
        if (elapsed <= 0) return; // a caller that read the clock before another: nothing to add
        stamp = now;
        if (rate > 0) level = Math.min(capacity(rate), level + elapsed * (rate / NANOS_PER_SECOND));
    }

    /** Every bit ever taken, waited for or not: how much passed this bucket. */
    synchronized long bitsTaken() {
        return bitsTaken;
    }

    synchronized long rate() {
        return rate;
    }

    /** The level at {@code now}, in bits: below zero while requests are waiting. For tests. */
    synchronized double level(long now) {
        refill(now);
        return level;
    }
}
