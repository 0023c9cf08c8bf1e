package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;

/** A kind of failure repeated on a connection is logged at WARN the 1st, 10th, 100th, ... time, not every time. */
class RepliesFailureLogTest {
    @Test
    void onlyThePowersOfTenOfAKindAreLoud() {
        assertThat(LongStream.rangeClosed(1, 100_000).filter(Replies::loud).boxed().toList())
            .containsExactly(1L, 10L, 100L, 1_000L, 10_000L, 100_000L);
    }
}
