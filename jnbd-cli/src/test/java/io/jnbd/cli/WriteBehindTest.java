package io.jnbd.cli;

import io.jnbd.server.io.NativeIo;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

class WriteBehindTest {

    @Test
    void everyRangeWrittenAndSettledReadsBack(@TempDir Path dir) throws Exception {
        assumeTrue(NativeIo.AVAILABLE, "no native calls on this platform");
        Path file = dir.resolve("out.img");
        int chunk = 64 << 10, chunks = 3 * WriteBehind.WINDOW + 5;
        byte[] data = new byte[chunk * chunks];
        new Random(3).nextBytes(data);
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
             WriteBehind behind = WriteBehind.open(file)) {
            assertThat(behind).isNotNull();
            // Out of order, as a copy's completions arrive.
            for (int i = chunks - 1; i >= 0; i--) {
                ch.write(ByteBuffer.wrap(data, i * chunk, chunk), (long) i * chunk);
                behind.written((long) i * chunk, chunk);
            }
        }
        assertThat(Files.readAllBytes(file)).isEqualTo(data);
    }

    @Test
    void noFileNoWriteBehind(@TempDir Path dir) {
        assertThat(WriteBehind.open(dir.resolve("missing"))).isNull();
    }
}
