package io.jnbd.pool.memserver;

import static io.jnbd.pool.memserver.PageStore.PAGE;
import static io.jnbd.pool.memserver.TestData.bytes;
import static io.jnbd.pool.memserver.TestData.discardAndTellIfResident;
import static io.jnbd.pool.memserver.TestData.read;
import static io.jnbd.pool.memserver.TestData.write;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** A full store refuses new pages whole, keeps serving the pages it has, and takes new ones once room is freed. */
class PageStoreFullTest {
    private static final int S = PageStore.space(1, 0);

    @TempDir
    Path dir;

    @Test
    void ramOnlyStoreRefusesANewPageAndChangesNothing() throws IOException {
        try (PageStore store = new PageStore(4L * PAGE, null, 0, 0)) {
            for (int i = 0; i < 4; i++) write(store, S, (long) i * PAGE, bytes(i, PAGE));
            assertThat(store.freeBytes()).isZero();
            byte[] before = read(store, S, 3L * PAGE, 2 * PAGE);

            // Its first 100 bytes land in a page that exists, the rest would need a fifth.
            ByteBuffer across = ByteBuffer.wrap(bytes(99, 200));
            assertThatThrownBy(() -> store.write(S, 4L * PAGE - 100, across))
                .isInstanceOfSatisfying(StoreFullException.class, e -> {
                    assertThat(e.limit()).isEqualTo(StoreFullException.Limit.CAPACITY);
                    assertThat(e.client()).isEqualTo(1);
                });
            assertThat(across.position()).as("nothing consumed").isZero();
            assertThat(read(store, S, 3L * PAGE, 2 * PAGE)).isEqualTo(before);
            assertThat(store.hasData(S, 4L * PAGE, PAGE)).isFalse();
            assertThat(store.usedBytes(1)).isEqualTo(4L * PAGE);

            byte[] patch = bytes(7, 1000);
            write(store, S, 2L * PAGE + 5, patch);
            assertThat(read(store, S, 2L * PAGE + 5, 1000)).isEqualTo(patch);

            store.discard(S, 0, PAGE);
            assertThat(store.freeBytes()).isEqualTo(PAGE);
            write(store, S, 4L * PAGE - 100, bytes(99, 200));
            assertThat(read(store, S, 4L * PAGE - 100, 200)).isEqualTo(bytes(99, 200));
            assertThat(read(store, S, 0, PAGE)).as("discarded page").isEqualTo(new byte[PAGE]);
        }
    }

    @Test
    void aWriteNeedingMorePagesThanAreFreeTakesNone() throws IOException {
        try (PageStore store = new PageStore(4L * PAGE, null, 0, 0)) {
            for (int i = 0; i < 3; i++) write(store, S, (long) i * PAGE, bytes(i, PAGE));
            assertThatThrownBy(() -> write(store, S, 3L * PAGE, bytes(3, 2 * PAGE)))
                .isInstanceOf(StoreFullException.class);
            assertThat(store.hasData(S, 3L * PAGE, 2 * PAGE)).isFalse();
            assertThat(store.usedBytes(1)).isEqualTo(3L * PAGE);
            assertThat(store.freeBytes()).isEqualTo(PAGE);
            write(store, S, 3L * PAGE, bytes(3, PAGE));
        }
    }

    @Test
    void ramAndSpillFullRefusesANewPageAndServesSpilledPagesInPlace() throws IOException {
        try (PageStore store = new PageStore(2L * PAGE, dir, 3L * PAGE, 0)) {
            for (int i = 0; i < 5; i++) write(store, S, (long) i * PAGE, bytes(i, PAGE));
            assertThat(store.ramUsedBytes()).isEqualTo(2L * PAGE);
            assertThat(store.spillUsedBytes()).isEqualTo(3L * PAGE);
            assertThat(store.freeBytes()).isZero();

            byte[] before = read(store, S, 0, 5 * PAGE);
            assertThatThrownBy(() -> write(store, S, 5L * PAGE + 10, bytes(5, 10)))
                .isInstanceOfSatisfying(StoreFullException.class,
                    e -> assertThat(e.limit()).isEqualTo(StoreFullException.Limit.CAPACITY));
            assertThat(read(store, S, 0, 5 * PAGE)).isEqualTo(before);
            assertThat(store.hasData(S, 5L * PAGE, PAGE)).isFalse();

            // No slot is free to evict into, so spilled pages are read and written in the file.
            byte[] expected = before.clone();
            for (int i = 0; i < 5; i++) {
                byte[] patch = bytes(100 + i, 3000);
                write(store, S, (long) i * PAGE + 777, patch);
                System.arraycopy(patch, 0, expected, i * PAGE + 777, patch.length);
            }
            assertThat(read(store, S, 0, 5 * PAGE)).isEqualTo(expected);
            assertThat(store.ramUsedBytes()).isEqualTo(2L * PAGE);
            assertThat(store.spillUsedBytes()).isEqualTo(3L * PAGE);

            // Discard a spilled page: the new one then needs a frame, and gets it by evicting into that slot.
            long page = 0;
            while (discardAndTellIfResident(store, S, page)) page++;
            assertThat(store.freeBytes()).isEqualTo((page + 1) * PAGE);
            write(store, S, 5L * PAGE + 10, bytes(5, 10));
            assertThat(read(store, S, 5L * PAGE + 10, 10)).isEqualTo(bytes(5, 10));
        }
    }

    @Test
    void quotaHoldsEachClientWhileOthersStillWrite() throws IOException {
        int c1a = PageStore.space(1, 0), c1b = PageStore.space(1, 1), c2 = PageStore.space(2, 0);
        try (PageStore store = new PageStore(16L * PAGE, null, 0, 3L * PAGE)) {
            write(store, c1a, 0, bytes(1, 2 * PAGE));
            write(store, c1b, 0, bytes(2, 100));
            assertThat(store.usedBytes(1)).isEqualTo(3L * PAGE);
            assertThatThrownBy(() -> write(store, c1b, 5L * PAGE, bytes(3, 1)))
                .isInstanceOfSatisfying(StoreFullException.class, e -> {
                    assertThat(e.limit()).isEqualTo(StoreFullException.Limit.CLIENT_QUOTA);
                    assertThat(e.client()).isEqualTo(1);
                });
            assertThat(store.hasData(c1b, 5L * PAGE, PAGE)).isFalse();

            write(store, c2, 0, bytes(4, 3 * PAGE));
            assertThat(store.usedBytes(2)).isEqualTo(3L * PAGE);
            assertThatThrownBy(() -> write(store, c2, 3L * PAGE, bytes(5, 1)))
                .isInstanceOfSatisfying(StoreFullException.class, e -> assertThat(e.client()).isEqualTo(2));

            write(store, c1a, 10, bytes(6, 500)); // rewriting what it holds needs no quota
            store.discard(c1a, PAGE, PAGE);
            write(store, c1b, 5L * PAGE, bytes(3, 1));
            assertThat(store.usedBytes(1)).isEqualTo(3L * PAGE);

            store.dropClient(2);
            assertThat(store.usedBytes(2)).isZero();
            assertThat(store.hasData(c2, 0, 3L * PAGE)).isFalse();
            byte[] first = bytes(1, PAGE);
            System.arraycopy(bytes(6, 500), 0, first, 10, 500);
            assertThat(read(store, c1a, 0, PAGE)).isEqualTo(first);
            assertThat(store.spaces()).containsOnlyKeys(c1a, c1b);
        }
    }

    @Test
    void quotaCountsBothTiers() throws IOException {
        try (PageStore store = new PageStore(2L * PAGE, dir, 8L * PAGE, 4L * PAGE)) {
            write(store, S, 0, bytes(1, 4 * PAGE));
            assertThat(store.spillUsedBytes()).isEqualTo(2L * PAGE);
            assertThat(store.freeBytes()).isEqualTo(6L * PAGE);
            assertThatThrownBy(() -> write(store, S, 4L * PAGE, bytes(2, 1)))
                .isInstanceOfSatisfying(StoreFullException.class,
                    e -> assertThat(e.limit()).isEqualTo(StoreFullException.Limit.CLIENT_QUOTA));
            write(store, PageStore.space(2, 0), 0, bytes(3, 4 * PAGE));
        }
    }
}
