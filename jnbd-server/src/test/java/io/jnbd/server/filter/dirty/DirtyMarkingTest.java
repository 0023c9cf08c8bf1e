package io.jnbd.server.filter.dirty;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MetaExtent;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * What a write marks, at byte offsets that straddle blocks and in the export's short last block, and how block status
 * reports it: runs of equal blocks merged, the first extent from the offset asked even inside a block, never past the
 * length asked or the export's end.
 */
class DirtyMarkingTest {
    static final int G = 4096;
    /** Three blocks and a short fourth one. */
    static final long SIZE = 3L * G + 1000;
    static final String CTX = "qemu:dirty-bitmap:b0";

    @TempDir
    Path dir;

    private Backend open() throws Exception {
        return ExportSpec.parse("d", "memory:" + SIZE + ",filter=dirty,dirty-bitmap=b0,dirty-granularity=4K,dirty-dir=" + dir.resolve("bm")).open();
    }

    private static ByteBuffer bytes(int n) {
        return ByteBuffer.allocate(n);
    }

    @Test
    void aCleanBitmapIsOneCleanExtentToTheEnd() throws Exception {
        try (Backend b = open()) {
            assertThat(b.metaContexts()).containsExactly(CTX);
            assertThat(b.metaExtents(CTX, 0, SIZE)).containsExactly(new MetaExtent(SIZE, 0));
            assertThat(b.metaExtents(CTX, 100, 1L << 40)).as("asked past the end: up to the end").containsExactly(new MetaExtent(SIZE - 100, 0));
            assertThat(FilterBackend.find(b, DirtyBitmaps.class).list()).containsExactly(new DirtyBitmaps.Info("b0", true, G, 0));
        }
    }

    @Test
    void oneByteAcrossNothingMarksOneBlockAndAWriteOverABoundaryMarksBoth() throws Exception {
        try (Backend b = open()) {
            b.write(G - 1, bytes(1), false); // last byte of block 0
            assertThat(b.metaExtents(CTX, 0, SIZE)).containsExactly(new MetaExtent(G, 1), new MetaExtent(SIZE - G, 0));
            b.write(2L * G - 1, bytes(2), false); // last byte of block 1, first of block 2
            assertThat(b.metaExtents(CTX, 0, SIZE)).as("merged: blocks 0-2 dirty")
                .containsExactly(new MetaExtent(3L * G, 1), new MetaExtent(1000, 0));
        }
    }

    @Test
    void theShortLastBlockIsReportedToTheExportsEnd() throws Exception {
        try (Backend b = open()) {
            b.zero(SIZE - 1, 1, false, false, false);
            assertThat(b.metaExtents(CTX, 0, SIZE)).containsExactly(new MetaExtent(3L * G, 0), new MetaExtent(1000, 1));
            assertThat(FilterBackend.find(b, DirtyBitmaps.class).list().getFirst().dirtyBytes()).as("the last block counts its 1000 bytes").isEqualTo(1000);
            b.trim(0, 1, false);
            assertThat(FilterBackend.find(b, DirtyBitmaps.class).list().getFirst().dirtyBytes()).isEqualTo(G + 1000);
        }
    }

    @Test
    void extentsStartWhereAskedAndStopAtTheLengthAsked() throws Exception {
        try (Backend b = open()) {
            b.write(G, bytes(2 * G), false); // blocks 1 and 2
            assertThat(b.metaExtents(CTX, G + 10, 1)).as("one byte inside a dirty block").containsExactly(new MetaExtent(1, 1));
            assertThat(b.metaExtents(CTX, G + 10, SIZE)).as("mid-block start: the block's state from there")
                .containsExactly(new MetaExtent(2L * G - 10, 1), new MetaExtent(1000, 0));
            assertThat(b.metaExtents(CTX, 10, G)).as("cut at the length asked, inside block 1")
                .containsExactly(new MetaExtent(G - 10, 0), new MetaExtent(10, 1));
            List<MetaExtent> one = b.metaExtents(CTX, 0, SIZE).subList(0, 1);
            assertThat(one).as("what a REQ_ONE reply takes: the first extent, whole").containsExactly(new MetaExtent(G, 0));
        }
    }

    @Test
    void oneAnswerHoldsAtMostItsLimitOfExtentsAndTheRestIsAskedAgain() throws Exception {
        long blocks = 2L * BitmapFile.MAX_EXTENTS + 10;
        String spec = "memory:" + blocks * 512 + ",filter=dirty,dirty-bitmap=b0,dirty-granularity=512,dirty-dir=" + dir.resolve("many");
        try (Backend b = ExportSpec.parse("d", spec).open()) {
            for (long i = 0; i < blocks; i += 2) b.write(i * 512, bytes(1), false);
            List<MetaExtent> first = b.metaExtents(CTX, 0, b.size());
            assertThat(first).hasSize(BitmapFile.MAX_EXTENTS);
            assertThat(first.getFirst()).isEqualTo(new MetaExtent(512, 1));
            assertThat(first.getLast()).isEqualTo(new MetaExtent(512, 0));
            long covered = first.stream().mapToLong(MetaExtent::length).sum();
            assertThat(b.metaExtents(CTX, covered, b.size() - covered).getFirst()).as("asked on from there").isEqualTo(new MetaExtent(512, 1));
        }
    }

    @Test
    void vectoredWritesMarkTheirWholeLength() throws Exception {
        try (Backend b = open()) {
            b.write(100, new ByteBuffer[] {bytes(G), bytes(G)}, false);
            assertThat(b.metaExtents(CTX, 0, SIZE)).containsExactly(new MetaExtent(3L * G, 1), new MetaExtent(1000, 0));
        }
    }

    @Test
    void otherContextsGoDownAndAnUnknownBitmapNamesThoseThatExist() throws Exception {
        try (Backend b = open()) {
            assertThat(org.assertj.core.api.Assertions.catchThrowable(() -> b.metaExtents("qemu:dirty-bitmap:nope", 0, 10)))
                .isInstanceOf(io.jnbd.server.backend.NbdErrorException.class).hasMessageContaining("'nope'").hasMessageContaining("b0");
            assertThat(org.assertj.core.api.Assertions.catchThrowable(() -> b.metaExtents("base:other", 0, 10)))
                .isInstanceOf(io.jnbd.server.backend.NbdErrorException.class);
        }
    }
}
