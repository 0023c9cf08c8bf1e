package io.jnbd.pool;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.pool.memserver.MemServer;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The client's page cache and readahead (cache=, readahead=): a page read twice is fetched once, a sequential
 * reader has the pages ahead of it fetched before it asks, and a write or trim through the volume is never
 * hidden by a cached page. What the memory servers sent is counted at the proxies in front of them.
 */
@Timeout(60)
class PoolCacheTest {
    static final int KIB64 = 64 << 10;

    @Test
    void thePoolsOwnCacheKeyIsItsUnlessTheSpecNamesTheCacheFilter() {
        String pool = "pool:127.0.0.1:1,127.0.0.1:2,size=8M,";
        io.jnbd.server.ExportSpec own = io.jnbd.server.ExportSpec.parse("p", pool + "cache=1M");
        assertThat(own.options().asMap()).containsEntry("cache", "1M");
        assertThat(own.filters().isEmpty()).isTrue();
        // nbdkit's cache filter has a key of the same name: with filter=cache, cache= is the filter's.
        io.jnbd.server.ExportSpec filtered = io.jnbd.server.ExportSpec.parse("p", pool + "cache=writethrough,filter=cache");
        assertThat(filtered.options().asMap()).doesNotContainKey("cache");
        assertThat(filtered.filters().filters().getFirst().options().asMap()).containsEntry("cache", "writethrough");
        assertThatThrownBy(() -> io.jnbd.server.ExportSpec.parse("p", pool + "filter=cache,cache=1M"))
            .hasMessageContaining("cache must be writeback or writethrough or unsafe, not '1M'");
    }

    @Test
    void aRepeatedReadIsServedFromTheCacheAndWithoutOneItGoesToAServerEachTime() throws Exception {
        try (TestCluster c = new TestCluster(2, MemServer.Config.ofMemory(32L << 20));
             PoolVolume cached = PoolVolume.open(PoolFaultTest.config(c, 8L << 20, 2).withCache(1 << 20, 0))) {
            write(cached, 0, PoolFaultTest.pattern(1, KIB64));
            read(cached, 0, KIB64);
            long before = c.bytesToClients();
            assertThat(read(cached, 0, KIB64)).isEqualTo(PoolFaultTest.pattern(1, KIB64));
            assertThat(c.bytesToClients() - before).as("bytes fetched for a cached read").isLessThan(1024);
        }
        try (TestCluster c = new TestCluster(2, MemServer.Config.ofMemory(32L << 20));
             PoolVolume plain = PoolVolume.open(PoolFaultTest.config(c, 8L << 20, 2))) {
            write(plain, 0, PoolFaultTest.pattern(1, KIB64));
            read(plain, 0, KIB64);
            long before = c.bytesToClients();
            read(plain, 0, KIB64);
            assertThat(c.bytesToClients() - before).as("bytes fetched without a cache").isGreaterThanOrEqualTo(KIB64);
        }
    }

    @Test
    void writesAndTrimsThroughTheVolumeAreNeverHiddenByACachedPage() throws Exception {
        try (TestCluster c = new TestCluster(2, MemServer.Config.ofMemory(32L << 20));
             PoolVolume v = PoolVolume.open(PoolFaultTest.config(c, 8L << 20, 2).withCache(1 << 20, 256 << 10))) {
            write(v, 4096, PoolFaultTest.pattern(2, KIB64));
            assertThat(read(v, 4096, KIB64)).isEqualTo(PoolFaultTest.pattern(2, KIB64));
            // a write that covers part of a cached page, and one across cached pages
            write(v, 4096 + 100, PoolFaultTest.pattern(3, 10));
            byte[] expected = PoolFaultTest.pattern(2, KIB64);
            System.arraycopy(PoolFaultTest.pattern(3, 10), 0, expected, 100, 10);
            assertThat(read(v, 4096, KIB64)).isEqualTo(expected);
            v.trim(4096, KIB64).get(10, TimeUnit.SECONDS);
            assertThat(read(v, 4096, KIB64)).isEqualTo(new byte[KIB64]);
        }
    }

    @Test
    void aSequentialReaderFindsThePagesAheadOfItAlreadyFetched() throws Exception {
        int readahead = 256 << 10;
        try (TestCluster c = new TestCluster(2, MemServer.Config.ofMemory(32L << 20));
             PoolVolume v = PoolVolume.open(PoolFaultTest.config(c, 8L << 20, 2).withCache(2 << 20, readahead))) {
            byte[] data = PoolFaultTest.pattern(4, 1 << 20);
            write(v, 0, data);
            long before = c.bytesToClients();
            read(v, 0, KIB64);
            read(v, KIB64, KIB64); // sequential: the next readahead bytes are fetched in the background
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (c.bytesToClients() - before < 2L * KIB64 + readahead && System.nanoTime() < deadline) Thread.sleep(10);
            assertThat(c.bytesToClients() - before).as("bytes fetched after two sequential reads")
                .isGreaterThanOrEqualTo(2L * KIB64 + readahead);
            // Everything up to the readahead's end is in the cache now: the servers may hang and it still reads.
            for (int i = 0; i < 2; i++) c.hang(i, true);
            try {
                byte[] got = read(v, 2L * KIB64, KIB64);
                byte[] expected = new byte[KIB64];
                System.arraycopy(data, 2 * KIB64, expected, 0, KIB64);
                assertThat(got).isEqualTo(expected);
            } finally {
                for (int i = 0; i < 2; i++) c.hang(i, false);
            }
        }
    }

    @Test
    void readaheadWithoutACacheIsRefusedWithTheReason() {
        assertThatThrownBy(() -> PoolConfig.of(java.util.List.of("127.0.0.1:1"), 1 << 20, 1).withCache(0, 1 << 20))
            .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("readahead needs a cache");
        assertThatThrownBy(() -> PoolConfig.of(java.util.List.of("127.0.0.1:1"), 1 << 20, 1).withCache(1 << 20, 1 << 20))
            .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("at most half the cache");
    }

    private static void write(PoolVolume v, long at, byte[] data) throws Exception {
        v.write(at, ByteBuffer.wrap(data)).get(10, TimeUnit.SECONDS);
    }

    private static byte[] read(PoolVolume v, long at, int n) throws Exception {
        ByteBuffer b = ByteBuffer.allocate(n);
        v.read(at, b).get(10, TimeUnit.SECONDS);
        return b.array();
    }
}
