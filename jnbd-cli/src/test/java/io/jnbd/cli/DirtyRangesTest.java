package io.jnbd.cli;

import io.jnbd.client.MetaExtent;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Walking a dirty bitmap: merged, aligned ranges, whatever lengths the server answers for. */
class DirtyRangesTest {

    private static final long K = 1024;

    /** A bitmap given as its extents; each answer stops after {@code perAnswer} of them, as a server may. */
    private static DirtyRanges.Status bitmap(int perAnswer, MetaExtent... extents) {
        return (offset, length) -> {
            List<MetaExtent> out = new ArrayList<>();
            for (MetaExtent e : extents) {
                if (e.end() <= offset || e.offset() >= offset + length) continue;
                long from = Math.max(offset, e.offset());
                out.add(new MetaExtent(from, Math.min(e.end(), offset + length) - from, e.flags()));
                if (out.size() == perAnswer) break;
            }
            return out;
        };
    }

    private static List<long[]> walk(DirtyRanges.Status status, long size, int align) throws Exception {
        List<long[]> ranges = new ArrayList<>();
        DirtyRanges.walk(status, size, align, (offset, length) -> ranges.add(new long[]{offset, length}));
        return ranges;
    }

    @Test
    void touchingDirtyExtentsMergeAcrossAnswersAndCleanOnesAreSkipped() throws Exception {
        var status = bitmap(1, new MetaExtent(0, 64 * K, 1), new MetaExtent(64 * K, 64 * K, 1),
            new MetaExtent(128 * K, 256 * K, 0), new MetaExtent(384 * K, 64 * K, 1), new MetaExtent(448 * K, 64 * K, 0));
        assertThat(walk(status, 512 * K, 1)).containsExactly(new long[]{0, 128 * K}, new long[]{384 * K, 64 * K});
    }

    @Test
    void rangesAreRoundedOutToTheAlignmentAndClippedToTheDisk() throws Exception {
        long size = 10_000;
        var status = bitmap(100, new MetaExtent(0, 100, 0), new MetaExtent(100, 50, 1), new MetaExtent(150, 4000, 0),
            new MetaExtent(4150, 10, 1), new MetaExtent(4160, 5830, 0), new MetaExtent(9990, 10, 1));
        // 100..150 -> 0..4096; 4150..4160 -> 4096..8192, touching: one range; 9990..10000 -> 8192..10000, touching too.
        assertThat(walk(status, size, 4096)).containsExactly(new long[]{0, size});
        assertThat(walk(status, size, 1)).containsExactly(new long[]{100, 50}, new long[]{4150, 10}, new long[]{9990, 10});
    }

    @Test
    void aDiskLargerThanOneRequestIsWalkedInSteps() throws Exception {
        long size = 3 * DirtyRanges.STEP + 4096;
        List<Long> asked = new ArrayList<>();
        var all = bitmap(Integer.MAX_VALUE, new MetaExtent(0, DirtyRanges.STEP - 4096, 0),
            new MetaExtent(DirtyRanges.STEP - 4096, 8192, 1), new MetaExtent(DirtyRanges.STEP + 4096, size - DirtyRanges.STEP - 4096, 0));
        DirtyRanges.Status status = (offset, length) -> {
            asked.add(length);
            return all.of(offset, length);
        };
        assertThat(walk(status, size, 512)).containsExactly(new long[]{DirtyRanges.STEP - 4096, 8192});
        assertThat(asked).containsExactly(DirtyRanges.STEP, DirtyRanges.STEP, DirtyRanges.STEP, 4096L);
    }

    @Test
    void aCleanBitmapHasNoRangesAndAGapInTheAnswerIsRefused() throws Exception {
        assertThat(walk(bitmap(5, new MetaExtent(0, 1 << 20, 0)), 1 << 20, 1)).isEmpty();
        assertThatThrownBy(() -> walk((offset, length) -> List.of(new MetaExtent(offset + 1, 1, 1)), 100, 1))
            .isInstanceOf(IOException.class).hasMessageContaining("did not describe offset 0");
    }

    @Test
    void theCountingWalkKeepsItsRangesForTheCopyUpToABound() throws Exception {
        var status = bitmap(2, new MetaExtent(0, 64 * K, 1), new MetaExtent(64 * K, 64 * K, 0),
            new MetaExtent(128 * K, 64 * K, 1), new MetaExtent(192 * K, 64 * K, 0));
        DirtyRanges.Total total = DirtyRanges.total(status, 256 * K, 4096);
        assertThat(total.bytes()).isEqualTo(128 * K);
        assertThat(total.ranges()).isEqualTo(2);
        List<long[]> replayed = new ArrayList<>();
        DirtyRanges.Status none = (offset, length) -> {
            throw new AssertionError("walked again although the ranges were kept");
        };
        assertThat(total.replay(none, 256 * K, 4096, (o, n) -> replayed.add(new long[]{o, n}))).isEqualTo(2);
        assertThat(replayed).containsExactly(new long[]{0, 64 * K}, new long[]{128 * K, 64 * K});
    }

    @Test
    void moreRangesThanTheBoundAreWalkedAgain() throws Exception {
        int n = DirtyRanges.KEEP_MAX + 1;
        MetaExtent[] extents = new MetaExtent[2 * n];
        for (int i = 0; i < n; i++) {
            extents[2 * i] = new MetaExtent(2L * i * 4096, 4096, 1);
            extents[2 * i + 1] = new MetaExtent((2L * i + 1) * 4096, 4096, 0);
        }
        long size = 2L * n * 4096;
        var status = bitmap(Integer.MAX_VALUE, extents);
        DirtyRanges.Total total = DirtyRanges.total(status, size, 4096);
        assertThat(total.kept()).isNull();
        assertThat(total.ranges()).isEqualTo(n);
        List<long[]> replayed = new ArrayList<>();
        assertThat(total.replay(status, size, 4096, (o, len) -> replayed.add(new long[]{o, len}))).isEqualTo(n);
        assertThat(replayed).hasSize(n);
        assertThat(replayed.getLast()).containsExactly(2L * (n - 1) * 4096, 4096);
    }
}
