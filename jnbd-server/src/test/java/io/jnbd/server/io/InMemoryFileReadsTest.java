package io.jnbd.server.io;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.ConnectionContext;
import io.jnbd.server.backend.FileBackend;
import io.jnbd.server.backend.NamedViews;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Files on tmpfs (a base image kept in RAM, a cow-dir in /dev/shm) are read on the connection's thread like cached
 * files: the kernel refuses RWF_NOWAIT there, and without this every small read went to the I/O pool (a boot storm
 * on tmpfs: read p50 15 ms against 0.4 ms on ext4). The bytes read that way are the file's, a read past the end
 * declines with nothing moved, and a file on a disk's file system still asks the page cache.
 */
@Timeout(60)
class InMemoryFileReadsTest {
    private static final int SIZE = 1 << 20;

    @TempDir
    Path diskDir;
    Path shm;
    byte[] bytes;

    @BeforeEach
    void makeDirs() throws IOException {
        Path devShm = Path.of("/dev/shm");
        assertThat(Files.getFileStore(devShm).type()).as("/dev/shm's file system on this machine").isEqualTo("tmpfs");
        shm = Files.createTempDirectory(devShm, "jnbd-test-");
        bytes = new byte[SIZE];
        new Random(5).nextBytes(bytes);
    }

    @AfterEach
    void removeShm() throws IOException {
        try (Stream<Path> all = Files.walk(shm)) {
            for (Path p : all.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
        }
    }

    @Test
    void aFileOnTmpfsIsReadOnTheConnectionsThread() throws Exception {
        Path file = shm.resolve("base.img");
        Files.write(file, bytes);
        try (FileBackend b = new FileBackend(file, FileBackend.Mode.CACHED, true, 0)) {
            assertThat(b.pageCache().inMemory()).isTrue();
            Random r = new Random(9);
            for (int i = 0; i < 200; i++) {
                int length = 1 + r.nextInt(128 * 1024), offset = r.nextInt(SIZE - length + 1);
                ByteBuffer dst = ByteBuffer.allocateDirect(length);
                assertThat(b.readIfCached(offset, dst)).as("read of %d at %d", length, offset).isTrue();
                assertThat(dst.position()).isEqualTo(length);
                assertThat(bytesOf(dst)).isEqualTo(Arrays.copyOfRange(bytes, offset, offset + length));
            }
            ByteBuffer past = ByteBuffer.allocateDirect(8192);
            assertThat(b.pageCache().readIfCached(past, SIZE - 4096)).as("a read running past the end declines").isFalse();
            assertThat(past.position()).isZero();
        }
    }

    @Test
    void aFileOnADisksFileSystemStillAsksThePageCache() throws Exception {
        Path file = diskDir.resolve("base.img");
        Files.write(file, bytes);
        assertThat(Files.getFileStore(file).type()).isNotIn("tmpfs", "ramfs");
        try (FileBackend b = new FileBackend(file, FileBackend.Mode.CACHED, true, 0)) {
            assertThat(b.pageCache().inMemory()).isFalse();
            ByteBuffer dst = ByteBuffer.allocateDirect(4096);
            // Just written, so cached; where the file system refuses RWF_NOWAIT the answer is no, with nothing moved.
            if (b.readIfCached(4096, dst)) assertThat(bytesOf(dst)).isEqualTo(Arrays.copyOfRange(bytes, 4096, 8192));
            else assertThat(dst.position()).isZero();
        }
    }

    @Test
    void aCowOverlayOnTmpfsAnswersEveryBlockStateQuickly() throws Exception {
        Path base = shm.resolve("base.img");
        Files.write(base, bytes);
        try (Backend chain = ExportSpec.parse("boot", "file:" + base + ",filter=cow,cow-overlay=client,cow-block-size=64K,cow-dir="
                + shm.resolve("cow")).open()) {
            assertThat(((NamedViews) chain).refusal("pc1", List.of())).isNull();
            Backend c = chain.forConnection(new ConnectionContext("pc1", List.of(), "test"));
            byte[] model = bytes.clone();
            byte[] written = new byte[100_000];
            new Random(3).nextBytes(written);
            c.write(70_000, ByteBuffer.wrap(written), false); // blocks 1-2 become the overlay's data, copied up around it
            System.arraycopy(written, 0, model, 70_000, written.length);
            c.zero(6 * 65536, 2 * 65536, true, false, false); // blocks 6-7 read as zeroes
            Arrays.fill(model, 6 * 65536, 8 * 65536, (byte) 0);
            // From the base's block 0 through the overlay's data to its zeroes and the base again, in one read.
            int offset = 1000, length = 10 * 65536;
            ByteBuffer dst = ByteBuffer.allocateDirect(length);
            assertThat(c.readIfCached(offset, dst)).isTrue();
            assertThat(bytesOf(dst)).isEqualTo(Arrays.copyOfRange(model, offset, offset + length));
            c.connectionClosed();
        }
    }

    private static byte[] bytesOf(ByteBuffer filled) {
        byte[] got = new byte[filled.position()];
        filled.flip().get(got);
        return got;
    }
}
