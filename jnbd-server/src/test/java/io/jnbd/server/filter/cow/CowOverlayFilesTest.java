package io.jnbd.server.filter.cow;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.ConnectionContext;
import io.jnbd.server.backend.NamedViews;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * What a cow overlay on disk does with what a crash or an operator may leave: a torn end of its map is cut and the
 * flushed blocks before it read back; damage no crash makes, a changed base, or another block size are refused with
 * a message, never served.
 */
@Timeout(60)
class CowOverlayFilesTest {
    static final int SIZE = 1 << 20;

    @TempDir
    Path dir;
    Path base, cow, map;
    byte[] baseBytes;

    @BeforeEach
    void makeBase() throws IOException {
        base = dir.resolve("base.img");
        cow = dir.resolve("cow");
        map = cow.resolve("clients/pc/map");
        baseBytes = new byte[SIZE];
        new Random(3).nextBytes(baseBytes);
        Files.write(base, baseBytes);
    }

    private String spec(String extra) {
        return "file:" + base + ",filter=cow,cow-overlay=client,cow-block-size=4K,cow-dir=" + cow + extra;
    }

    /** Writes {@code data} at {@code offset} of overlay pc and flushes. */
    private void writeFlushed(long offset, byte[] data) throws Exception {
        try (Backend chain = ExportSpec.parse("b", spec("")).open()) {
            assertThat(((NamedViews) chain).refusal("pc", List.of())).isNull();
            Backend c = chain.forConnection(new ConnectionContext("pc", List.of(), "t"));
            c.write(offset, ByteBuffer.allocateDirect(data.length).put(data).flip(), false);
            c.flush();
            c.connectionClosed();
        }
    }

    private String refusalAtOpen(String extra) throws Exception {
        try (Backend chain = ExportSpec.parse("b", spec(extra)).open()) {
            return ((NamedViews) chain).refusal("pc", List.of());
        }
    }

    private byte[] read(long offset, int length) throws Exception {
        try (Backend chain = ExportSpec.parse("b", spec("")).open()) {
            assertThat(((NamedViews) chain).refusal("pc", List.of())).isNull();
            Backend c = chain.forConnection(new ConnectionContext("pc", List.of(), "t"));
            ByteBuffer b = ByteBuffer.allocateDirect(length);
            c.read(offset, b);
            c.connectionClosed();
            byte[] out = new byte[length];
            b.flip().get(out);
            return out;
        }
    }

    @Test
    void aTornEndOfTheMapIsCutAndWhatWasFlushedReadsBack() throws Exception {
        byte[] data = new byte[10000];
        new Random(1).nextBytes(data);
        writeFlushed(5000, data);
        long before = Files.size(map);
        // A crash while the next batch was appended: part of a record, and a whole one of garbage.
        Files.write(map, new byte[] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, StandardOpenOption.APPEND);
        assertThat(read(5000, 10000)).isEqualTo(data);
        assertThat(Files.size(map)).as("the torn end is cut").isEqualTo(before);
        assertThat(read(0, 5000)).as("the base around it").isEqualTo(Arrays.copyOf(baseBytes, 5000));
    }

    @Test
    void theMapRecordsChangesOfStateNotEveryFlush() throws Exception {
        try (Backend chain = ExportSpec.parse("b", spec("")).open()) {
            assertThat(((NamedViews) chain).refusal("pc", List.of())).isNull();
            Backend c = chain.forConnection(new ConnectionContext("pc", List.of(), "t"));
            for (int i = 0; i < 100; i++) {
                c.write(100, ByteBuffer.allocateDirect(10).put(new byte[] {(byte) i, 1, 2, 3, 4, 5, 6, 7, 8, 9}).flip(), true);
            }
            c.zero(0, 4096, true, false, true);
            c.write(100, ByteBuffer.allocateDirect(1).put((byte) 77).flip(), true);
            c.connectionClosed();
        }
        assertThat(Files.size(map)).as("header and three records: data, zero, data").isEqualTo(OverlayMap.HEADER + 3 * OverlayMap.RECORD);
        byte[] expected = new byte[4096];
        System.arraycopy(baseBytes, 0, expected, 0, 4096);
        java.util.Arrays.fill(expected, (byte) 0);
        expected[100] = 77;
        assertThat(read(0, 4096)).isEqualTo(expected);
    }

    @Test
    void aChangedBaseRefusesTheOverlay() throws Exception {
        writeFlushed(0, new byte[] {1, 2, 3});
        try (RandomAccessFile f = new RandomAccessFile(base.toFile(), "rw")) {
            f.seek(100);
            f.write(new byte[] {9, 9, 9}); // a reimaged base: its first MiB differs
        }
        assertThat(refusalAtOpen("")).contains("overlay cannot be opened").contains("base's contents changed");
    }

    @Test
    void aGrownBaseRefusesTheOverlay() throws Exception {
        writeFlushed(0, new byte[] {1, 2, 3});
        Files.write(base, new byte[4096], StandardOpenOption.APPEND);
        assertThat(refusalAtOpen("")).contains("made over " + SIZE + " bytes");
    }

    @Test
    void anotherBlockSizeRefusesTheOverlay() throws Exception {
        writeFlushed(0, new byte[] {1, 2, 3});
        assertThat(refusalAtOpen("")).as("the same block size").isNull();
        String other = "file:" + base + ",filter=cow,cow-overlay=client,cow-block-size=8K,cow-dir=" + cow;
        try (Backend chain = ExportSpec.parse("b", other).open()) {
            assertThat(((NamedViews) chain).refusal("pc", List.of())).contains("cow-block-size=4096");
        }
    }

    @Test
    void damageNoCrashMakesIsRefused() throws Exception {
        writeFlushed(0, new byte[] {1, 2, 3});
        // A header that is not whole.
        try (RandomAccessFile f = new RandomAccessFile(map.toFile(), "rw")) {
            f.seek(20);
            f.write(0x55);
        }
        assertThat(refusalAtOpen("")).contains("damaged header");
    }

    @Test
    void aDataFileThatLostItsLengthIsRefused() throws Exception {
        writeFlushed(0, new byte[] {1, 2, 3});
        try (var ch = java.nio.channels.FileChannel.open(cow.resolve("clients/pc/data"), StandardOpenOption.WRITE)) {
            ch.truncate(4096);
        }
        assertThat(refusalAtOpen("")).contains("data file").contains("damaged");
    }

    @Test
    void theBaseOpensReadOnly() throws Exception {
        try (Backend chain = ExportSpec.parse("b", spec("")).open()) {
            Backend inner = ((io.jnbd.server.backend.FilterBackend) chain).inner();
            while (inner instanceof io.jnbd.server.backend.FilterBackend f) inner = f.inner();
            assertThat(inner.can(Backend.Capability.WRITE)).as("the base offers WRITE").isFalse();
            assertThat(chain.can(Backend.Capability.WRITE)).as("the cow export does").isTrue();
            assertThat(chain.has(Backend.Trait.ZERO_COPY)).as("no sendfile past the overlay").isFalse();
        }
    }
}
