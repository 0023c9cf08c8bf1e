package io.jnbd.cli;

import org.junit.jupiter.api.Test;

import java.io.IOException;

import static org.assertj.core.api.Assertions.assertThat;

/** The prefix a stopped or failed copy calls complete: no further than the lowest chunk not yet done well. */
class CopyTallyTest {

    @Test
    void chunksFinishingOutOfOrderMoveThePrefixOnlyPastTheLowestOneInFlight() {
        CopyTally t = new CopyTally(100);
        assertThat(t.prefix()).isZero();
        t.started(0, 10);
        t.started(10, 10);
        t.started(20, 10);
        t.finished(10, 10, null);
        assertThat(t.prefix()).isZero();
        assertThat(t.copied()).isEqualTo(10);
        t.finished(0, 10, null);
        assertThat(t.prefix()).isEqualTo(20);
        t.finished(20, 10, null);
        assertThat(t.prefix()).isEqualTo(30);
        assertThat(t.howFar("a", "b")).isEqualTo("copied 30 of 100 bytes (30.0%) from a to b; the first 30 bytes are complete");
    }

    @Test
    void aFailedChunkBoundsThePrefixWhateverFinishesAfterIt() {
        CopyTally t = new CopyTally(100);
        t.started(0, 10);
        t.started(10, 10);
        t.started(20, 10);
        t.finished(10, 10, new IOException("refused"));
        t.finished(20, 10, null);
        t.finished(0, 10, new IOException("second failure"));
        assertThat(t.failure()).hasMessage("refused");
        assertThat(t.failedAt()).isEqualTo(10);
        assertThat(t.prefix()).isEqualTo(10);
        assertThat(t.copied()).isEqualTo(10);
    }

    @Test
    void anIncrementalCopyCountsDirtyBytesAgainstTheirTotalAndItsPrefixIsStillAnOffset() {
        // 20 dirty bytes in two ranges of a 1000-byte disk: the prefix is where every dirty byte below is copied.
        CopyTally t = new CopyTally(20, "dirty bytes");
        t.started(100, 10);
        t.started(500, 10);
        t.finished(100, 10, null);
        assertThat(t.howFar("a", "b")).isEqualTo("copied 10 of 20 dirty bytes (50.0%) from a to b; the first 500 bytes are complete");
    }
}
