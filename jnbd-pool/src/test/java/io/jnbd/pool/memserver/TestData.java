package io.jnbd.pool.memserver;

import static io.jnbd.pool.memserver.PageStore.PAGE;
import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Random;

/** Test data and the observations the PageStore tests share. */
final class TestData {
    private TestData() {}

    /** Bytes that differ for every seed, so that a page served in place of another shows. */
    static byte[] bytes(long seed, int length) {
        byte[] b = new byte[length];
        new Random(seed).nextBytes(b);
        return b;
    }

    static void write(PageStore store, int space, long offset, byte[] data) throws IOException {
        ByteBuffer src = ByteBuffer.allocateDirect(data.length).put(data).flip();
        store.write(space, offset, src);
        assertThat(src.hasRemaining()).isFalse();
    }

    static byte[] read(PageStore store, int space, long offset, int length) throws IOException {
        ByteBuffer dst = ByteBuffer.allocateDirect(length);
        store.read(space, offset, dst);
        byte[] b = new byte[length];
        dst.flip().get(b);
        return b;
    }

    /**
     * Whether the page was in RAM, told by which tier gives back a page when it is discarded: an
     * observation that does not depend on timing, and unlike a read does not bring the page back into RAM.
     */
    static boolean discardAndTellIfResident(PageStore store, int space, long pageIndex) throws IOException {
        long ram = store.ramUsedBytes(), spill = store.spillUsedBytes();
        store.discard(space, pageIndex * PAGE, PAGE);
        long ramFreed = ram - store.ramUsedBytes(), spillFreed = spill - store.spillUsedBytes();
        assertThat(ramFreed + spillFreed).as("page %d held data", pageIndex).isEqualTo(PAGE);
        return ramFreed == PAGE;
    }
}
