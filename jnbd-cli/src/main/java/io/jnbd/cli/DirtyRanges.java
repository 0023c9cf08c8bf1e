package io.jnbd.cli;

import io.jnbd.client.MetaExtent;
import io.jnbd.client.NbdClient;

import java.io.IOException;
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
    static void walk(NbdClient src, String context, int align, Sink sink) throws Exception {
        walk((at, n) -> src.blocking().blockStatus(context, at, n), src.size(), align, sink);
    }

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

    /** The dirty bytes {@link #walk} would hand over, and in how many ranges. */
    record Total(long bytes, long ranges) {}

    static Total total(NbdClient src, String context, int align) throws Exception {
        long[] sum = new long[2];
        walk(src, context, align, (offset, length) -> {
            sum[0] += length;
            sum[1]++;
        });
        return new Total(sum[0], sum[1]);
    }
}
