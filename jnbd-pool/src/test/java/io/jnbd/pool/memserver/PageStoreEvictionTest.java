package io.jnbd.pool.memserver;

import static io.jnbd.pool.memserver.PageStore.PAGE;
import static io.jnbd.pool.memserver.TestData.bytes;
import static io.jnbd.pool.memserver.TestData.discardAndTellIfResident;
import static io.jnbd.pool.memserver.TestData.read;
import static io.jnbd.pool.memserver.TestData.write;
import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.file.Path;
import java.util.Arrays;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Which pages RAM keeps: CLOCK, where a page earns its second chance by being used after it arrived. Which
 * tier holds a page is observed through the tier counters when it is discarded, never through timing.
 */
class PageStoreEvictionTest {
    private static final int S = PageStore.space(3, 1);

    @TempDir
    Path dir;

    @Test
    void pagesReadSinceTheyArrivedStayAndTheOthersGoToSpill() throws IOException {
        try (PageStore store = new PageStore(4L * PAGE, dir, 16L * PAGE, 0)) {
            for (int i = 0; i < 4; i++) write(store, S, (long) i * PAGE, bytes(i, PAGE));
            read(store, S, PAGE + 10, 10);
            read(store, S, 3L * PAGE, PAGE);
            write(store, S, 4L * PAGE, bytes(4, PAGE));
            write(store, S, 5L * PAGE, bytes(5, PAGE));
            assertThat(store.ramUsedBytes()).isEqualTo(4L * PAGE);
            assertThat(store.spillUsedBytes()).isEqualTo(2L * PAGE);

            assertThat(discardAndTellIfResident(store, S, 1)).as("page 1, read").isTrue();
            assertThat(discardAndTellIfResident(store, S, 3)).as("page 3, read").isTrue();
            assertThat(discardAndTellIfResident(store, S, 0)).as("page 0, written once").isFalse();
            assertThat(discardAndTellIfResident(store, S, 2)).as("page 2, written once").isFalse();
            assertThat(discardAndTellIfResident(store, S, 4)).as("page 4, newest").isTrue();
            assertThat(discardAndTellIfResident(store, S, 5)).as("page 5, newest").isTrue();
        }
    }

    /**
     * Plain CLOCK, where arrival sets the bit, fails this: every frame of a stream of new pages has its bit
     * set when the hand comes round, so once per turn the hot page goes out with the rest (and its next read
     * brings it back). Streams of every length up to five turns show that whatever the phase.
     */
    @Test
    void aPageReadBetweenWritesOutlivesAStreamOfNewPages() throws IOException {
        int hot = PageStore.space(3, 2);
        byte[] hotBytes = Arrays.copyOfRange(bytes(-1, PAGE), 4096, 4160);
        for (int stream = 0; stream <= 40; stream++) {
            try (PageStore store = new PageStore(8L * PAGE, dir, 64L * PAGE, 0)) {
                write(store, hot, 0, bytes(-1, PAGE));
                for (int i = 0; i < stream; i++) {
                    assertThat(read(store, hot, 4096, 64)).isEqualTo(hotBytes);
                    write(store, S, (long) i * PAGE, bytes(i, PAGE));
                }
                assertThat(store.spillUsedBytes()).isEqualTo(Math.max(0, stream - 7L) * PAGE);
                assertThat(discardAndTellIfResident(store, hot, 0)).as("hot page after %d new ones", stream).isTrue();
                // Pages nobody came back to leave in the order they came: the newest seven are in RAM.
                for (int i = 0; i < stream; i++) {
                    assertThat(discardAndTellIfResident(store, S, i)).as("page %d of %d", i, stream)
                        .isEqualTo(i >= stream - 7);
                }
                assertThat(store.ramUsedBytes() + store.spillUsedBytes()).isZero();
            }
        }
    }

    @Test
    void aSpilledPageThatIsReadComesBackIntoRam() throws IOException {
        try (PageStore store = new PageStore(2L * PAGE, dir, 8L * PAGE, 0)) {
            for (int i = 0; i < 3; i++) write(store, S, (long) i * PAGE, bytes(i, PAGE));
            assertThat(store.spillUsedBytes()).isEqualTo(PAGE); // page 0, the oldest
            assertThat(read(store, S, 0, PAGE)).isEqualTo(bytes(0, PAGE));
            assertThat(store.ramUsedBytes()).isEqualTo(2L * PAGE);
            assertThat(store.spillUsedBytes()).isEqualTo(PAGE);
            assertThat(discardAndTellIfResident(store, S, 0)).isTrue();
        }
    }

    @Test
    void aSpilledPageThatIsWrittenComesBackWithItsOldBytesAroundTheNewOnes() throws IOException {
        try (PageStore store = new PageStore(2L * PAGE, dir, 8L * PAGE, 0)) {
            for (int i = 0; i < 3; i++) write(store, S, (long) i * PAGE, bytes(i, PAGE));
            byte[] patch = bytes(42, 5000);
            write(store, S, 1000, patch);
            byte[] expected = bytes(0, PAGE);
            System.arraycopy(patch, 0, expected, 1000, patch.length);
            assertThat(store.spillUsedBytes()).isEqualTo(PAGE);
            assertThat(read(store, S, 0, PAGE)).isEqualTo(expected);
            assertThat(discardAndTellIfResident(store, S, 0)).isTrue();
        }
    }
}
