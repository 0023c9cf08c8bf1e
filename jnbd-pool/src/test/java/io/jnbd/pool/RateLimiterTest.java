package io.jnbd.pool;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** Recovery's token bucket, on a clock the test moves. */
class RateLimiterTest {
    static final long MIB = 1 << 20;

    @Test
    void aBucketIdleForAMinuteLetsTheNextChunkGoAtOnce() {
        // Idle time times the rate used to overflow a long after 17 s at 512 MiB/s, and the next chunk slept
        // for up to 17 s instead of going at once.
        AtomicLong now = new AtomicLong(1_000_000_000L);
        Recovery.RateLimiter limiter = new Recovery.RateLimiter(512 * MIB, now::get);
        now.addAndGet(TimeUnit.SECONDS.toNanos(60));
        assertThat(limiter.reserve(MIB)).isZero();
        now.addAndGet(TimeUnit.HOURS.toNanos(5));
        assertThat(limiter.reserve(MIB)).isZero();
    }

    @Test
    void aSteadyStreamIsHeldToTheRate() {
        AtomicLong now = new AtomicLong();
        Recovery.RateLimiter limiter = new Recovery.RateLimiter(100 * MIB, now::get);
        long waited = 0;
        for (int i = 0; i < 1000; i++) {
            long w = limiter.reserve(MIB);
            waited += w;
            now.addAndGet(w); // the caller sleeps that long
        }
        // 1000 MiB at 100 MiB/s: 10 s, less the 100 ms of burst the bucket starts empty of.
        assertThat(TimeUnit.NANOSECONDS.toMillis(waited)).isBetween(9_800L, 10_100L);
    }

    @Test
    void noLimitNeverWaits() {
        Recovery.RateLimiter limiter = new Recovery.RateLimiter(0, () -> 0L);
        assertThat(limiter.reserve(1L << 40)).isZero();
    }
}
