package io.jnbd.cli;

import io.jnbd.client.ClientOptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.Arrays;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The destination of an incremental copy: an existing file, kept as it is but for what is written or zeroed. */
class ExistingDestinationTest {

    /** Large enough that zeroing it behind takes a while: 64 writes, each waited for once 32 more follow. */
    private static final int SIZE = 64 << 20;

    @ParameterizedTest(name = "write-behind {0}")
    @ValueSource(booleans = {false, true})
    void zeroesAndWritesLandAndTheRestIsKept(boolean writeBehind, @TempDir Path dir) throws Exception {
        Path file = dir.resolve("dst.img");
        byte[] old = new byte[SIZE];
        Arrays.fill(old, (byte) 0xee);
        Files.write(file, old);
        try (Disk dst = Disk.openExisting(file.toString(), SIZE, ClientOptions.defaults(), writeBehind)) {
            // More than one zero buffer's worth (1 MiB pieces), so that several writes are in flight behind.
            dst.zero(4096, SIZE - 8192).join();
            // Done means written: the copy counts the range as copied and flushes after the last one.
            assertThat(firstOther(Files.readAllBytes(file), 4096, SIZE - 4096, 0)).as("first byte not zeroed").isEqualTo(-1);
            dst.write(8192, ByteBuffer.wrap(new byte[]{1, 2, 3})).join();
            dst.flush();
        }
        byte[] now = Files.readAllBytes(file);
        assertThat(now).hasSize(SIZE);
        assertThat(firstOther(now, 0, 4096, 0xee)).isEqualTo(-1);
        assertThat(Arrays.copyOfRange(now, 8192, 8195)).containsExactly(1, 2, 3);
        assertThat(firstOther(now, 4096, 8192, 0)).isEqualTo(-1);
        assertThat(firstOther(now, 8195, SIZE - 4096, 0)).isEqualTo(-1);
        assertThat(firstOther(now, SIZE - 4096, SIZE, 0xee)).isEqualTo(-1);
    }

    /** The first offset in [from, to) not holding {@code value}, or -1: a short message where a whole array would not be. */
    private static int firstOther(byte[] b, int from, int to, int value) {
        for (int i = from; i < to; i++) if (b[i] != (byte) value) return i;
        return -1;
    }

    @Test
    void aMissingFileOrAnotherSizeIsRefusedAndNothingIsCreatedOrResized(@TempDir Path dir) throws Exception {
        Path none = dir.resolve("none.img");
        assertThatThrownBy(() -> Disk.openExisting(none.toString(), SIZE, ClientOptions.defaults(), false))
            .isInstanceOf(NoSuchFileException.class).hasMessageContaining("it creates none");
        assertThat(none).doesNotExist();
        Path small = Files.write(dir.resolve("small.img"), new byte[4096]);
        assertThatThrownBy(() -> Disk.openExisting(small.toString(), SIZE, ClientOptions.defaults(), false))
            .isInstanceOf(IOException.class).hasMessageContaining("has 4096 bytes, the source " + SIZE);
        assertThat(Files.size(small)).isEqualTo(4096);
    }
}
