package io.jnbd.cli;

import io.jnbd.client.MetaExtent;
import io.jnbd.client.NbdClient;

import java.io.IOException;
import java.util.Arrays;
import java.util.List;

/**
 * The ranges a dirty bitmap ({@code qemu:dirty-bitmap:NAME}) reports dirty, walked over the whole disk a large
 * request at a time, merged where they touch and rounded out to the copy's alignment. Rounding out copies a few
 * clean bytes more, never a dirty byte less: the source is the truth for both.
 */
final class DirtyRanges {

    /** Bytes described per block status request: four requests walk a 4 GiB disk. */
    static final long STEP = 1L << 30;

    private DirtyRanges() {
    }

    interface Sink {
        void range(long offset, long length) throws Exception;
    }

    /** One block status request: extents from {@code offset}, covering at most {@code length} bytes. */
    interface Status {
        List<MetaExtent> of(long offset, long length) throws IOException;
    }

    /** Hands {@code sink} each merged dirty range of {@code src}'s bitmap {@code context}, in ascending order. */
    static void walk(Status status, long size, int align, Sink sink) throws Exception {
        long start = -1;
        long end = -1;
        for (long at = 0; at < size; ) {
            List<MetaExtent> extents = status.of(at, Math.min(size - at, STEP));
            if (extents.isEmpty() || extents.getFirst().offset() != at) {
                throw new IOException("the dirty bitmap did not describe offset " + at);
            }
            for (MetaExtent e : extents) {
                if (e.has(MetaExtent.DIRTY)) {
                    long from = e.offset() / align * align;
                    long to = Math.min(size, (e.end() + align - 1) / align * align);
                    if (start >= 0 && from <= end) {
                        end = Math.max(end, to);
                    } else {
                        if (start >= 0) sink.range(start, end - start);
                        start = from;
                        end = to;
                    }
                }
                at = e.end();
            }
        }
        if (start >= 0) sink.range(start, end - start);
    }

    /** At most this many ranges are kept from the counting walk for the copy (16 bytes each). */
    static final int KEEP_MAX = 1 << 16;

    /**
     * The dirty bytes {@link #walk} would hand over, in how many ranges, and the ranges themselves ({@code offset,
     * length} pairs) when there are at most {@link #KEEP_MAX} of them, else null.
     */
    record Total(long bytes, long ranges, long[] kept) {

        /**
         * Hands {@code sink} the ranges again: those kept, or else those of a new walk of the bitmap. Returns how
         * many it handed.
         */
        long replay(Status status, long size, int align, Sink sink) throws Exception {
            if (kept != null) {
                for (int i = 0; i < kept.length; i += 2) sink.range(kept[i], kept[i + 1]);
                return kept.length / 2;
            }
            long[] n = new long[1];
            walk(status, size, align, (offset, length) -> {
                n[0]++;
                sink.range(offset, length);
            });
            return n[0];
        }
    }

    /** Block status of {@code src}'s metadata context {@code context}. */
    static Status status(NbdClient src, String context) {
        return (at, n) -> src.blocking().blockStatus(context, at, n);
    }

    static Total total(Status status, long size, int align) throws Exception {
        var sum = new Object() {
            long bytes;
            long ranges;
            long[] kept = new long[64];
        };
        walk(status, size, align, (offset, length) -> {
            if (sum.kept != null && sum.ranges == KEEP_MAX) {
                sum.kept = null;
            } else if (sum.kept != null) {
                int at = (int) sum.ranges * 2;
                if (at == sum.kept.length) sum.kept = Arrays.copyOf(sum.kept, at * 2);
                sum.kept[at] = offset;
                sum.kept[at + 1] = length;
            }
            sum.bytes += length;
            sum.ranges++;
        });
        return new Total(sum.bytes, sum.ranges, sum.kept == null ? null : Arrays.copyOf(sum.kept, (int) sum.ranges * 2));
    }
}
