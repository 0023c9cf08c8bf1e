package io.jnbd.server.filter.dirty;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MetaExtent;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The bitmaps on disk: kept across a close and reopen in the state they were in (frozen stays frozen, one added while
 * serving is loaded though the spec does not name it), and a file that is torn, cut short, damaged or made for another
 * image is never taken as clean: it is rebuilt all dirty.
 */
class DirtyFilesTest {
    static final int G = 4096;
    static final long SIZE = 64L * G;
    static final MetaExtent ALL_DIRTY = new MetaExtent(SIZE, 1);

    @TempDir
    Path dir;
    Path img, bm;
    String spec;

    @BeforeEach
    void image() throws IOException {
        img = dir.resolve("vm.img");
        bm = dir.resolve("vm.img.bitmaps");
        Files.write(img, new byte[(int) SIZE]);
        spec = "file:" + img + ",filter=dirty,dirty-bitmap=b0,dirty-granularity=4K";
    }

    private Backend open() throws IOException {
        return ExportSpec.parse("d", spec).open();
    }

    private static List<MetaExtent> map(Backend b, String name) throws IOException {
        return b.metaExtents("qemu:dirty-bitmap:" + name, 0, SIZE);
    }

    @Test
    void bitmapsComeBackAsTheyWereLeftBesideTheImageByDefault() throws Exception {
        try (Backend b = open()) {
            DirtyBitmaps d = FilterBackend.find(b, DirtyBitmaps.class);
            b.write(0, ByteBuffer.allocate(10), false);
            d.rotate("b0", "b1");
            b.write(5L * G, ByteBuffer.allocate(10), false);
            d.add("extra");
            b.write(9L * G, ByteBuffer.allocate(10), false);
        }
        assertThat(bm.resolve("b0.bitmap")).exists();
        try (Backend b = open()) {
            DirtyBitmaps d = FilterBackend.find(b, DirtyBitmaps.class);
            assertThat(d.list()).containsExactly(new DirtyBitmaps.Info("b0", false, G, G), new DirtyBitmaps.Info("b1", true, G, 2L * G),
                new DirtyBitmaps.Info("extra", true, G, G));
            assertThat(b.metaContexts()).containsExactly("qemu:dirty-bitmap:b0", "qemu:dirty-bitmap:b1", "qemu:dirty-bitmap:extra");
            b.write(20L * G, ByteBuffer.allocate(1), false);
            assertThat(map(b, "b0")).as("frozen: no new marks").containsExactly(new MetaExtent(G, 1), new MetaExtent(SIZE - G, 0));
            assertThat(d.list().get(1).dirtyBytes()).isEqualTo(3L * G);
            d.remove("extra");
            d.clear("b1");
            assertThat(d.list().get(1).dirtyBytes()).isZero();
        }
        assertThat(bm.resolve("extra.bitmap")).doesNotExist();
        try (Backend b = open()) {
            DirtyBitmaps d = FilterBackend.find(b, DirtyBitmaps.class);
            assertThat(d.list()).containsExactly(new DirtyBitmaps.Info("b0", false, G, G), new DirtyBitmaps.Info("b1", true, G, 0));
        }
    }

    @Test
    void operationsRefuseWhatCannotBe() throws Exception {
        try (Backend b = open()) {
            DirtyBitmaps d = FilterBackend.find(b, DirtyBitmaps.class);
            assertThat(catchThrowable(() -> d.add("b0"))).isInstanceOf(IOException.class).hasMessageContaining("exists");
            assertThat(catchThrowable(() -> d.add("../x"))).isInstanceOf(IOException.class).hasMessageContaining("not 1 to 64");
            assertThat(catchThrowable(() -> d.clear("nope"))).isInstanceOf(IOException.class).hasMessageContaining("bitmaps: b0");
            d.rotate("b0", "b1");
            assertThat(catchThrowable(() -> d.rotate("b0", "b2"))).isInstanceOf(IOException.class).hasMessageContaining("frozen");
            assertThat(catchThrowable(() -> d.rotate("b1", "b0"))).isInstanceOf(IOException.class).hasMessageContaining("exists");
            assertThat(d.list()).extracting(DirtyBitmaps.Info::name).containsExactly("b0", "b1");
        }
    }

    @Test
    void aDamagedHeaderIsRebuiltAllDirtyKeepingNothingClean() throws Exception {
        try (Backend b = open()) { /* made clean */ }
        flipByte(bm.resolve("b0.bitmap"), 20);
        try (Backend b = open()) {
            assertThat(map(b, "b0")).containsExactly(ALL_DIRTY);
            assertThat(FilterBackend.find(b, DirtyBitmaps.class).list().getFirst().recording()).isTrue();
        }
    }

    @Test
    void bitsThatDoNotMatchTheirCrcAfterACleanCloseAreRebuiltAllDirty() throws Exception {
        try (Backend b = open()) {
            b.write(0, ByteBuffer.allocate(1), false);
            FilterBackend.find(b, DirtyBitmaps.class).rotate("b0", "b1");
        }
        flipByte(bm.resolve("b0.bitmap"), BitmapFile.HEADER + 1); // a frozen bitmap's bits changed
        try (Backend b = open()) {
            assertThat(map(b, "b0")).containsExactly(ALL_DIRTY);
            assertThat(FilterBackend.find(b, DirtyBitmaps.class).list().getFirst().recording()).as("still frozen").isFalse();
            assertThat(map(b, "b1")).containsExactly(new MetaExtent(SIZE, 0));
        }
    }

    @Test
    void aFileCutShortOrNotABitmapIsRebuiltAllDirty() throws Exception {
        try (Backend b = open()) { /* made clean */ }
        try (FileChannel ch = FileChannel.open(bm.resolve("b0.bitmap"), StandardOpenOption.WRITE)) {
            ch.truncate(BitmapFile.HEADER + 10);
        }
        Files.writeString(bm.resolve("junk.bitmap"), "not a bitmap");
        try (Backend b = open()) {
            assertThat(map(b, "b0")).containsExactly(ALL_DIRTY);
            assertThat(map(b, "junk")).containsExactly(ALL_DIRTY);
        }
    }

    @Test
    void aBitmapOfAnotherImageOrSizeIsRebuiltAllDirty() throws Exception {
        try (Backend b = open()) { /* made clean */ }
        Path copy = dir.resolve("copy.img");
        Files.copy(img, copy);
        Files.move(copy, img, java.nio.file.StandardCopyOption.REPLACE_EXISTING); // the same bytes, another file
        try (Backend b = open()) {
            assertThat(map(b, "b0")).as("a replaced image").containsExactly(ALL_DIRTY);
            FilterBackend.find(b, DirtyBitmaps.class).clear("b0");
        }
        spec = spec.replace("dirty-granularity=4K", "dirty-granularity=8K");
        try (Backend b = open()) {
            assertThat(b.metaExtents("qemu:dirty-bitmap:b0", 0, SIZE)).as("another granularity").containsExactly(ALL_DIRTY);
        }
    }

    @Test
    void aWriteToTheImageWhileNoServerTrackedItMakesTheRecordingBitmapsAllDirty() throws Exception {
        try (Backend b = open()) {
            b.write(0, ByteBuffer.allocate(1), false);
            FilterBackend.find(b, DirtyBitmaps.class).rotate("b0", "b1");
        }
        try (Backend b = open()) {
            assertThat(map(b, "b1")).as("closed cleanly, the image untouched since").containsExactly(new MetaExtent(SIZE, 0));
        }
        try (FileChannel ch = FileChannel.open(img, StandardOpenOption.WRITE)) {
            ch.write(ByteBuffer.wrap(new byte[] {1}), 7L * G); // another program, no server running
        }
        Files.setLastModifiedTime(img, java.nio.file.attribute.FileTime.fromMillis(Files.getLastModifiedTime(img).toMillis() + 2000));
        try (Backend b = open()) {
            assertThat(map(b, "b1")).as("recording: it should have seen that write").containsExactly(ALL_DIRTY);
            assertThat(map(b, "b0")).as("frozen before it: unchanged").containsExactly(new MetaExtent(G, 1), new MetaExtent(SIZE - G, 0));
        }
    }

    @Test
    void aBitmapOfAMemoryExportIsAllDirtyAfterARestart() throws Exception {
        String mem = "memory:" + SIZE + ",filter=dirty,dirty-bitmap=b0,dirty-dir=" + bm;
        try (Backend b = ExportSpec.parse("m", mem).open()) {
            assertThat(map(b, "b0")).containsExactly(new MetaExtent(SIZE, 0));
        }
        try (Backend b = ExportSpec.parse("m", mem).open()) {
            assertThat(map(b, "b0")).as("the memory is new: every block may differ from a backup").containsExactly(ALL_DIRTY);
        }
    }

    @Test
    void aBitmapOfAnUnfinishedAddIsDropped() throws Exception {
        try (Backend b = open()) { /* made */ }
        Files.copy(bm.resolve("b0.bitmap"), bm.resolve("half.bitmap"));
        try (FileChannel ch = FileChannel.open(bm.resolve("half.bitmap"), StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            // state pending, header CRC made anew: what an add leaves when the server stops before it takes effect
            ByteBuffer h = ByteBuffer.allocate(BitmapFile.HEADER);
            ch.read(h, 0);
            h.putInt(12, BitmapFile.PENDING);
            java.util.zip.CRC32C crc = new java.util.zip.CRC32C();
            crc.update(h.array(), 0, BitmapFile.FIELDS);
            h.putInt(BitmapFile.FIELDS, (int) crc.getValue());
            ch.write(h.clear(), 0);
        }
        Files.writeString(bm.resolve("other.bitmap.tmp"), "half made");
        try (Backend b = open()) {
            assertThat(FilterBackend.find(b, DirtyBitmaps.class).list()).extracting(DirtyBitmaps.Info::name).containsExactly("b0");
        }
        assertThat(bm.resolve("half.bitmap")).doesNotExist();
        assertThat(bm.resolve("other.bitmap.tmp")).doesNotExist();
    }

    @Test
    void twoChainsOverOneDirectoryShareItsBitmapsAndAnotherImageIsRefused() throws Exception {
        try (Backend one = open(); Backend two = open()) {
            one.write(0, ByteBuffer.allocate(1), false);
            two.write(2L * G, ByteBuffer.allocate(1), false);
            assertThat(map(one, "b0")).as("as a reload's new chain and the old one")
                .isEqualTo(map(two, "b0")).startsWith(new MetaExtent(G, 1), new MetaExtent(G, 0), new MetaExtent(G, 1));
            Path other = dir.resolve("other.img");
            Files.write(other, new byte[(int) SIZE]);
            Throwable t = catchThrowable(() -> ExportSpec.parse("o", "file:" + other + ",filter=dirty,dirty-dir=" + bm).open());
            assertThat(t).isInstanceOf(IOException.class).hasMessageContaining("in use by another export");
        }
        try (Backend b = open()) {
            assertThat(map(b, "b0")).as("the last hold closed it cleanly").startsWith(new MetaExtent(G, 1));
        }
    }

    @Test
    void aReloadThatChangesTheFiltersSharesTheBitmapsWithTheOldChain() throws Exception {
        io.jnbd.server.ExportSet first = io.jnbd.server.ExportSet.open(List.of(ExportSpec.parse("d", spec)), null);
        Backend old = first.exports().find("d").backend();
        io.jnbd.server.ExportSet second = io.jnbd.server.ExportSet.open(List.of(ExportSpec.parse("d", spec + ",dirty-bitmap=b1")), null, first);
        Backend now = second.exports().find("d").backend();
        assertThat(now).isNotSameAs(old);
        old.write(0, ByteBuffer.allocate(1), false); // a connection of before the reload
        assertThat(map(now, "b1")).as("the new chain's bitmap is marked by the old chain too").startsWith(new MetaExtent(G, 1));
        old.close();
        now.write(3L * G, ByteBuffer.allocate(1), false);
        assertThat(FilterBackend.find(now, DirtyBitmaps.class).list()).extracting(DirtyBitmaps.Info::dirtyBytes).containsExactly(2L * G, 2L * G);
        now.close();
        try (Backend b = open()) {
            assertThat(FilterBackend.find(b, DirtyBitmaps.class).list()).extracting(DirtyBitmaps.Info::dirtyBytes).containsExactly(2L * G, 2L * G);
        }
    }

    private static void flipByte(Path f, long at) throws IOException {
        try (FileChannel ch = FileChannel.open(f, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            ByteBuffer one = ByteBuffer.allocate(1);
            ch.read(one, at);
            one.put(0, (byte) (one.get(0) ^ 0x5a)).clear();
            ch.write(one, at);
        }
    }
}
