package io.jnbd.server.backend;

import static org.assertj.core.api.Assertions.assertThat;

import java.lang.foreign.Arena;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Direct mode writes what the device takes straight to it, and only what it does not through a read-modify-write
 * of the filesystem blocks around it (issue 16: 1 KiB writes on a 512-byte-sector disk all took that path).
 */
class DirectWriteAlignmentTest {
    @TempDir
    Path dir;

    @Test
    void sectorAlignedWritesLandExactlyAndLeaveTheirNeighbours() throws Exception {
        Path file = dir.resolve("d.img");
        byte[] before = new byte[16384];
        for (int i = 0; i < before.length; i++) before[i] = (byte) (i * 7 + 3);
        Files.write(file, before);
        try (FileBackend b = new FileBackend(file, FileBackend.Mode.DIRECT, false, 0); Arena arena = Arena.ofConfined()) {
            int a = b.writeAlignment();
            assertThat(Integer.bitCount(a)).as("a power of two").isEqualTo(1);
            assertThat(a).isBetween(512, 4096);
            // 1 KiB at 1.5 KiB, from memory aligned to the write alignment only: the shape of a 1 KiB client write.
            ByteBuffer src = arena.allocate(a + 1024, a).asSlice(a, 1024).asByteBuffer();
            for (int i = 0; i < 1024; i++) src.put(i, (byte) 0xAB);
            b.write(1536, src, false);
            assertThat(src.hasRemaining()).isFalse();
            // and one that no device takes as it is: 100 bytes at an odd offset
            b.write(8191, ByteBuffer.wrap(new byte[100]).put(0, (byte) 0x55), false);

            ByteBuffer all = arena.allocate(16384, 4096).asByteBuffer();
            b.read(0, all);
            byte[] expected = before.clone();
            java.util.Arrays.fill(expected, 1536, 2560, (byte) 0xAB);
            java.util.Arrays.fill(expected, 8191, 8291, (byte) 0);
            expected[8191] = 0x55;
            byte[] got = new byte[16384];
            all.flip().get(got);
            assertThat(got).isEqualTo(expected);
        }
        assertThat(Files.size(file)).isEqualTo(16384);
    }
}
