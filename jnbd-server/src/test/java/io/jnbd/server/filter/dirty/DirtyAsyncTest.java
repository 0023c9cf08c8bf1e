package io.jnbd.server.filter.dirty;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.MetaExtent;
import io.jnbd.server.filter.AsyncMemory;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Over a backend that answers asynchronously (the pool): the filter keeps the asynchronous path, reads go straight to
 * it, and an asynchronous write, FUA or not, is marked before it starts.
 */
class DirtyAsyncTest {
    static final int G = 4096;

    @TempDir
    Path dir;

    @Test
    void asynchronousWritesAreMarkedAndReadsPassStraightDown() throws Exception {
        AsyncMemory memory = new AsyncMemory(8L * G);
        try (Backend b = new DirtyFilterFactory().wrap(memory, new BackendOptions(Map.of("dirty-bitmap", "a", "dirty-dir", dir.toString(),
                "dirty-granularity", "4K")))) {
            assertThat(b.traits()).containsExactlyInAnyOrderElementsOf(memory.traits());
            b.writeAsync(G, new ByteBuffer[] {ByteBuffer.allocateDirect(10)}, false).get();
            b.writeAsync(5L * G + 1, new ByteBuffer[] {ByteBuffer.allocateDirect(G)}, true).get();
            b.readAsync(0, ByteBuffer.allocateDirect(G)).get();
            assertThat(memory.asyncCalls).hasValue(3);
            assertThat(b.metaExtents("qemu:dirty-bitmap:a", 0, 8L * G)).containsExactly(new MetaExtent(G, 0), new MetaExtent(G, 1),
                new MetaExtent(3L * G, 0), new MetaExtent(2L * G, 1), new MetaExtent(G, 0));
        }
    }
}
