package io.jnbd.pool.memserver;

import static io.jnbd.pool.memserver.PageStore.PAGE;
import static io.jnbd.pool.memserver.TestData.bytes;
import static io.jnbd.pool.memserver.TestData.read;
import static io.jnbd.pool.memserver.TestData.write;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Creation, closing, the spill file's life, and the arguments a store refuses. */
class PageStoreLifecycleTest {
    private static final int S = PageStore.space(5, 9);

    @TempDir
    Path dir;

    @Test
    void closeDeletesTheSpillFile() throws IOException {
        PageStore store = new PageStore(PAGE, dir, 4L * PAGE, 0);
        Path spill = store.spillPath();
        assertThat(spill.getParent()).isEqualTo(dir);
        assertThat(spill).exists();
        write(store, S, 0, bytes(1, 3 * PAGE));
        assertThat(store.spillUsedBytes()).isEqualTo(2L * PAGE);
        store.close();
        assertThat(spill).doesNotExist();
        try (var left = Files.list(dir)) {
            assertThat(left).isEmpty();
        }
        store.close(); // a second close is harmless
    }

    @Test
    void storesSharingADirectoryHaveFilesOfTheirOwn() throws IOException {
        try (PageStore a = new PageStore(PAGE, dir, PAGE, 0); PageStore b = new PageStore(PAGE, dir, PAGE, 0)) {
            assertThat(a.spillPath()).isNotEqualTo(b.spillPath());
            write(a, S, 0, bytes(1, 2 * PAGE));
            write(b, S, 0, bytes(2, 2 * PAGE));
            assertThat(read(a, S, 0, 2 * PAGE)).isEqualTo(bytes(1, 2 * PAGE));
            assertThat(read(b, S, 0, 2 * PAGE)).isEqualTo(bytes(2, 2 * PAGE));
        }
    }

    @Test
    void aClosedStoreRefusesWork() throws IOException {
        PageStore store = new PageStore(PAGE, null, 0, 0);
        write(store, S, 0, bytes(1, 10));
        store.close();
        assertThatThrownBy(() -> read(store, S, 0, 10)).isInstanceOf(IllegalStateException.class);
        assertThatThrownBy(() -> write(store, S, 0, bytes(1, 10))).isInstanceOf(IllegalStateException.class);
        assertThatThrownBy(() -> store.dropSpace(S)).isInstanceOf(IllegalStateException.class);
    }

    /** An interrupted thread must not close the spill file under everyone (FileChannel's default). */
    @Test
    void anInterruptedThreadLeavesTheSpillFileWorking() throws IOException {
        byte[] all = bytes(1, 3 * PAGE);
        try (PageStore store = new PageStore(PAGE, dir, 4L * PAGE, 0)) {
            write(store, S, 0, all); // pages 0 and 1 go to spill
            Thread.currentThread().interrupt();
            try {
                write(store, S, 0, bytes(2, PAGE)); // evicts page 2, brings page 0 back
                assertThat(read(store, S, PAGE, PAGE)).isEqualTo(Arrays.copyOfRange(all, PAGE, 2 * PAGE));
            } finally {
                assertThat(Thread.interrupted()).as("the interrupt is left for the caller").isTrue();
            }
            assertThat(read(store, S, 2L * PAGE, PAGE)).isEqualTo(Arrays.copyOfRange(all, 2 * PAGE, 3 * PAGE));
            assertThat(read(store, S, 0, PAGE)).isEqualTo(bytes(2, PAGE));
        }
    }

    @Test
    void spacesNameClientAndUnit() {
        int space = PageStore.space(0xFFFF, 0xFFFF);
        assertThat(PageStore.clientOf(space)).isEqualTo(0xFFFF);
        assertThat(PageStore.clientOf(PageStore.space(7, 3))).isEqualTo(7);
        assertThatThrownBy(() -> PageStore.space(0x10000, 0)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> PageStore.space(0, -1)).isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void theLastBytesOfASpaceAreAddressableAndNoneBeyond() throws IOException {
        long end = 1L << 44;
        int top = PageStore.space(0xFFFF, 0xFFFF);
        try (PageStore store = new PageStore(2L * PAGE, null, 0, 0)) {
            write(store, top, end - 10, bytes(3, 10));
            assertThat(read(store, top, end - 10, 10)).isEqualTo(bytes(3, 10));
            assertThat(store.hasData(top, 0, end)).isTrue();
            assertThat(store.spaces()).containsEntry(top, (long) PAGE);
            assertThatThrownBy(() -> write(store, top, end - 10, bytes(3, 11))).isInstanceOf(IllegalArgumentException.class);
            assertThatThrownBy(() -> store.read(top, -1, ByteBuffer.allocate(1))).isInstanceOf(IllegalArgumentException.class);
            assertThatThrownBy(() -> store.discard(top, 0, end + 1)).isInstanceOf(IllegalArgumentException.class);
            store.discard(top, 0, end);
            assertThat(store.hasData(top, 0, end)).isFalse();
            assertThat(store.usedBytes(0xFFFF)).isZero();
        }
    }

    @Test
    void capacitiesMustBeWholePages() {
        assertThatThrownBy(() -> new PageStore(0, null, 0, 0)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> new PageStore(PAGE + 1, null, 0, 0)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> new PageStore(PAGE, null, PAGE, 0)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> new PageStore(PAGE, dir, 0, 0)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> new PageStore(PAGE, dir, 100, 0)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> new PageStore(PAGE, null, 0, -1)).isInstanceOf(IllegalArgumentException.class);
    }
}
