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
            // Out of order, as a copy's completions arrive, many in flight at once.
            java.util.List<java.util.concurrent.CompletableFuture<Void>> writes = new java.util.ArrayList<>();
            java.util.List<ByteBuffer> buffers = new java.util.ArrayList<>();
            for (int i = chunks - 1; i >= 0; i--) {
                ByteBuffer b = ByteBuffer.allocateDirect(chunk).put(data, i * chunk, chunk).flip();
                buffers.add(b);
                writes.add(behind.write(ch, (long) i * chunk, b));
            }
            java.util.concurrent.CompletableFuture.allOf(writes.toArray(java.util.concurrent.CompletableFuture[]::new))
                .get(30, java.util.concurrent.TimeUnit.SECONDS);
            assertThat(buffers).allMatch(b -> !b.hasRemaining());
        }
        assertThat(Files.readAllBytes(file)).isEqualTo(data);
    }

    @Test
    void aFailedWriteFailsItsFuture(@TempDir Path dir) throws Exception {
        assumeTrue(NativeIo.AVAILABLE, "no native calls on this platform");
        Path file = dir.resolve("out.img");
        Files.write(file, new byte[4096]);
        try (FileChannel readOnly = FileChannel.open(file); WriteBehind behind = WriteBehind.open(file)) {
            var f = behind.write(readOnly, 0, ByteBuffer.allocateDirect(4096));
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> f.get(30, java.util.concurrent.TimeUnit.SECONDS))
                .hasCauseInstanceOf(java.nio.channels.NonWritableChannelException.class);
        }
    }

    @Test
    void noFileNoWriteBehind(@TempDir Path dir) {
        assertThat(WriteBehind.open(dir.resolve("missing"))).isNull();
    }
}
