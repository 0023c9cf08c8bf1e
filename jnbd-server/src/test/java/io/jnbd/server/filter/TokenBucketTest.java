package io.jnbd.server.filter;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

/** The token bucket on a clock the test steps: every wait is exact arithmetic, nothing is timed. */
class TokenBucketTest {
    private static final long SECOND = 1_000_000_000L;

    @Test
    void aFullBucketLetsItsBurstThroughAtOnceThenTheRateDecides() {
        TokenBucket b = new TokenBucket(8000, 2.0, 0);
        assertThat(b.take(16000, 8000, 0)).as("two seconds' worth, as nbdkit's buckets start full").isZero();
        assertThat(b.take(8000, 8000, 0)).as("one second's worth more waits a second").isEqualTo(SECOND);
        assertThat(b.take(4000, 8000, 0)).as("behind the one before it").isEqualTo(SECOND + SECOND / 2);
        assertThat(b.level(SECOND + SECOND / 2)).isZero();
        assertThat(b.take(800, 8000, 2 * SECOND)).as("half a second later the bucket holds 4000").isZero();
        assertThat(b.bitsTaken()).isEqualTo(16000 + 8000 + 4000 + 800);
    }

    @Test
    void anIdleBucketRefillsOnlyToItsCapacity() {
        TokenBucket b = new TokenBucket(1000, 1.5, 0);
        assertThat(b.take(1500, 1000, 0)).isZero();
        assertThat(b.level(500_000_000L)).isEqualTo(500);
        assertThat(b.level(3600 * SECOND)).as("an hour idle: still one and a half seconds' worth").isEqualTo(1500);
        assertThat(b.take(2500, 1000, 3600 * SECOND)).isEqualTo(SECOND);
    }

    @Test
    void aRequestLargerThanTheBucketGoesThroughInDebtAndTheAverageStaysExact() {
        TokenBucket b = new TokenBucket(1_000_000, 2.0, 0);
        assertThat(b.take(5_000_000, 1_000_000, 0)).as("5 Mbit from a 2 Mbit bucket at 1 Mbit/s").isEqualTo(3 * SECOND);
        // A client that sends each request as soon as the one before has passed: after the burst, exactly the rate.
        long now = 3 * SECOND;
        for (int i = 0; i < 1000; i++) now += b.take(65_536 * 8, 1_000_000, now);
        long bits = 5_000_000 + 1000L * 65_536 * 8;
        assertThat(now).as("every bit beyond the first two seconds' worth took its time at the rate")
            .isBetween((bits - 2_000_000) * 1000 - 1000, (bits - 2_000_000) * 1000 + 1000);
    }

    @Test
    void requestsArrivingTogetherPassInTurn() {
        TokenBucket b = new TokenBucket(8, 1.0, 0);
        b.take(8, 8, 0);
        assertThat(b.take(8, 8, 0)).isEqualTo(SECOND);
        assertThat(b.take(8, 8, 0)).isEqualTo(2 * SECOND);
        assertThat(b.take(4, 8, SECOND)).as("a second later, two requests still ahead of it").isEqualTo(SECOND + SECOND / 2);
    }

    @Test
    void aNewRateKeepsTheLevelCutToTheNewCapacityAndZeroLiftsTheLimit() {
        TokenBucket b = new TokenBucket(1000, 2.0, 0);
        assertThat(b.take(0, 500, 0)).isZero();
        assertThat(b.rate()).isEqualTo(500);
        assertThat(b.level(0)).as("2000 bits cut to 2 s at 500 bit/s").isEqualTo(1000);
        assertThat(b.take(1500, 500, 0)).isEqualTo(SECOND);
        assertThat(b.take(1_000_000, 0, 0)).as("no limit: nothing waits").isZero();
        assertThat(b.take(1_000_000, 0, SECOND)).isZero();
        assertThat(b.take(100, 1000, SECOND)).as("a limit again starts from an empty bucket").isEqualTo(SECOND / 10);
    }

    @Test
    void aClockReadBeforeAnotherCallersAddsNothing() {
        TokenBucket b = new TokenBucket(1000, 1.0, 10 * SECOND);
        b.take(1000, 1000, 10 * SECOND);
        assertThat(b.take(500, 1000, 9 * SECOND)).isEqualTo(SECOND / 2);
        assertThat(b.level(10 * SECOND)).isEqualTo(-500);
    }
}
