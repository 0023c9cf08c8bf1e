package io.jnbd.server.filter;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Backend.Capability;
import io.jnbd.server.backend.Backend.Trait;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.Extent;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The cache filter against nbdkit's keys and modes: writeback defers writes until a flush, writethrough does not,
 * unsafe ignores flushes but still writes back when it closes, cache-on-read and NBD_CMD_CACHE fill it, eviction keeps
 * it within cache-max-size without losing a dirty block, and block status never calls a dirty block a hole.
 */
class CacheFilterTest {
    private static final CacheFilterFactory FACTORY = new CacheFilterFactory();
    private static final int K64 = 64 * 1024;

    @TempDir
    Path dir;

    CacheFilter cache(Backend inner, String... keyValues) throws IOException {
        Map<String, String> m = new LinkedHashMap<>();
        for (int i = 0; i < keyValues.length; i += 2) m.put(keyValues[i], keyValues[i + 1]);
        BackendOptions o = new BackendOptions(m);
        FACTORY.check(o);
        assertThat(FACTORY.refusal(o, inner.capabilities())).isNull();
        return new CacheFilter(inner, CacheFilterFactory.config(o), dir);
    }

    static byte[] pattern(long seed, int n) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

    static void write(Backend b, long offset, byte[] data, boolean fua) throws IOException {
        ByteBuffer src = ByteBuffer.allocateDirect(data.length).put(data).flip();
        b.write(offset, src, fua);
    }

    static byte[] read(Backend b, long offset, int length) throws IOException {
        ByteBuffer dst = ByteBuffer.allocateDirect(length);
        b.read(offset, dst);
        byte[] out = new byte[length];
        dst.flip().get(out);
        return out;
    }

    @Test
    void keysAreReadAsNbdkitReadsThemAndEachMistakeIsOneLineNamingItsKey() {
        CacheConfig c = CacheFilterFactory.config(BackendOptions.none());
        assertThat(c).isEqualTo(new CacheConfig(CacheConfig.Mode.WRITEBACK, K64, -1, 95, 80, CacheConfig.OnRead.OFF, null));
        assertThat(FACTORY.describe(new BackendOptions(Map.of("cache", "unsafe", "cache-max-size", "1G", "cache-on-read", "true"))))
            .isEqualTo("cache(unsafe, 64K blocks, at most 1G (reclaim 95% to 80%), on read)");
        assertThat(FACTORY.describe(new BackendOptions(Map.of("cache-min-block-size", "4K", "cache-on-read", "/run/warm"))))
            .isEqualTo("cache(writeback, 4K blocks, on read while /run/warm exists)");
        Map<String, String> bare = new LinkedHashMap<>();
        bare.put("cache-on-read", null);
        assertThat(CacheFilterFactory.config(new BackendOptions(bare)).onRead()).as("a bare key, as TOML gives true").isEqualTo(CacheConfig.OnRead.ON);

        assertThat(mistake("cache", "bogus")).isEqualTo("cache must be writeback or writethrough or unsafe, not 'bogus'");
        assertThat(mistake("cache-max-size", "12x")).isEqualTo("cache-max-size=12x is not a size (examples: 4096, 64K, 1G)");
        assertThat(mistake("cache-max-size", "512K")).isEqualTo("cache-max-size=512K is too small: at least 1M");
        assertThat(mistake("cache-min-block-size", "3000")).isEqualTo("cache-min-block-size=3000 must be a power of 2 from 4K to 1G");
        assertThat(mistake("cache-min-block-size", "2K")).isEqualTo("cache-min-block-size=2K must be a power of 2 from 4K to 1G");
        assertThat(mistake("cache-high-threshold", "101")).isEqualTo("cache-high-threshold must be a whole number from 1 to 100, not '101'");
        assertThat(mistake("cache-low-threshold", "0")).isEqualTo("cache-low-threshold must be a whole number from 1 to 100, not '0'");
        assertThat(mistake("cache-low-threshold", "96")).isEqualTo("cache-low-threshold=96 must be less than cache-high-threshold=95");
        assertThat(mistake("cache-on-read", "maybe")).isEqualTo("cache-on-read must be true, false or an absolute /PATH, not 'maybe'");
        assertThatThrownBy(() -> FACTORY.check(new BackendOptions(Map.of("cache-max-size", "1M", "cache-min-block-size", "2M"))))
            .hasMessage("cache-max-size=1M holds no block of cache-min-block-size=2M");
    }

    private static String mistake(String key, String value) {
        try {
            FACTORY.check(new BackendOptions(Map.of(key, value)));
        } catch (IllegalArgumentException e) {
            return e.getMessage();
        }
        throw new AssertionError(key + "=" + value + " was taken");
    }

    @Test
    void anExportSpecNamesTheExportAndACacheOverAReadOnlyBackendCachesReadsOnly() {
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,filter=cache,cache=bogus"))
            .hasMessage("export 'd': cache must be writeback or writethrough or unsafe, not 'bogus'");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,cache-max-size=1G"))
            .hasMessage("export 'd': cache-max-size= is a key of the cache filter: add filter=cache");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,readonly,filter=cache"))
            .hasMessage("export 'd': filter=cache: what is behind it is read-only, so the cache would hold nothing:"
                + " give cache-on-read=true (or /PATH)");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,readonly,filter=cache,cache=writethrough,cache-on-read=true"))
            .hasMessageStartingWith("export 'd': filter=cache: cache=writethrough caches writes, but what is behind it is read-only");
        ExportSpec ro = ExportSpec.parse("d=memory:1M,readonly,filter=cache,cache-on-read=true");
        assertThat(ro.filters().describe()).isEqualTo("readonly -> cache(writeback, 64K blocks, on read) -> ");
        assertThat(FACTORY.capabilities(BackendOptions.none(), EnumSet.of(Capability.FLUSH, Capability.EXTENTS)))
            .as("over a read-only backend: no write capability appears").containsExactlyInAnyOrder(Capability.FLUSH, Capability.EXTENTS, Capability.CACHE);
    }

    @Test
    void itKeepsOnlyTheRemoteTraitAndOffersFlushFuaCacheAndMultiConnOverAWritableBackend() throws IOException {
        Set<Capability> plain = EnumSet.of(Capability.WRITE, Capability.TRIM, Capability.ZERO, Capability.EXTENTS);
        try (CacheFilter c = cache(new CountingBackend(1 << 20, plain, EnumSet.allOf(Trait.class)));
             CacheFilter wt = cache(new CountingBackend(1 << 20, plain, Set.of(Trait.ASYNC, Trait.ZERO_COPY)), "cache", "writethrough")) {
            assertThat(c.traits()).containsExactly(Trait.REMOTE);
            assertThat(c.pageCache()).as("sendfile would skip the cache").isNull();
            assertThat(wt.traits()).isEmpty();
            assertThat(c.capabilities()).containsExactlyInAnyOrder(Capability.WRITE, Capability.TRIM, Capability.ZERO, Capability.EXTENTS,
                Capability.FLUSH, Capability.FUA, Capability.CACHE, Capability.MULTI_CONN);
            assertThat(wt.capabilities()).as("writethrough: multi-conn only as the backend has it").doesNotContain(Capability.MULTI_CONN);
            assertThat(c.blockSizes().preferred()).isEqualTo(K64);
        }
    }

    @Test
    void theCacheFileIsUnlinkedOnceOpen() throws IOException {
        try (CacheFilter c = cache(new CountingBackend(1 << 20))) {
            write(c, 0, pattern(1, 4096), false);
            try (Stream<Path> s = Files.list(dir)) {
                assertThat(s.toList()).isEmpty();
            }
        }
    }

    @Test
    void writebackDefersWritesUntilAFlushAndWritesBackEveryDirtyBlockThen() throws IOException {
        CountingBackend inner = new CountingBackend(1 << 20);
        try (CacheFilter c = cache(inner)) {
            byte[] a = pattern(1, 5000), b = pattern(2, K64);
            write(c, 100, a, false);
            write(c, 3 * K64, b, false);
            assertThat(inner.writes.get()).as("nothing written to the backend yet").isZero();
            assertThat(inner.bytes(100, a.length)).containsOnly(0);
            assertThat(inner.reads.get()).as("the partial block was read whole first").isEqualTo(1);
            assertThat(read(c, 100, a.length)).isEqualTo(a);
            assertThat(c.dirtyBlocks()).isEqualTo(2);

            c.flush();
            assertThat(inner.bytes(100, a.length)).isEqualTo(a);
            assertThat(inner.bytes(3 * K64, K64)).isEqualTo(b);
            assertThat(inner.flushes.get()).isEqualTo(1);
            assertThat(c.dirtyBlocks()).isZero();
            int writes = inner.writes.get();
            c.flush();
            assertThat(inner.writes.get()).as("clean blocks are not written again").isEqualTo(writes);
        }
    }

    @Test
    void aFlushWritesAdjacentDirtyBlocksBackTogether() throws IOException {
        CountingBackend inner = new CountingBackend(4 << 20);
        try (CacheFilter c = cache(inner)) {
            for (int i = 0; i < 20; i++) write(c, (long) i * K64, pattern(i, K64), false);
            write(c, 30L * K64 + 7, pattern(30, 10), false);
            c.flush();
            assertThat(inner.writes.get()).as("blocks 0-15, 16-19 (1 MiB a call) and 30").isEqualTo(3);
            for (int i = 0; i < 20; i++) assertThat(inner.bytes((long) i * K64, K64)).isEqualTo(pattern(i, K64));
        }
    }

    @Test
    void aFuaWriteInWritebackGoesThroughAndLeavesTheOtherDirtyBlocksBehind() throws IOException {
        CountingBackend inner = new CountingBackend(1 << 20);
        try (CacheFilter c = cache(inner)) {
            write(c, 0, pattern(1, 4096), false);
            byte[] f = pattern(2, 4096);
            write(c, 2 * K64, f, true);
            assertThat(inner.bytes(2 * K64, 4096)).isEqualTo(f);
            assertThat(inner.bytes(0, 4096)).containsOnly(0);
            assertThat(c.dirtyBlocks()).isEqualTo(1);
        }
    }

    @Test
    void writethroughWritesEveryWriteToTheBackendBeforeItReturns() throws IOException {
        CountingBackend inner = new CountingBackend(1 << 20);
        try (CacheFilter c = cache(inner, "cache", "writethrough")) {
            byte[] a = pattern(1, 5000), b = pattern(2, K64);
            write(c, 100, a, false);
            write(c, K64, b, false);
            assertThat(inner.bytes(100, a.length)).isEqualTo(a);
            assertThat(inner.bytes(K64, K64)).isEqualTo(b);
            assertThat(c.dirtyBlocks()).isZero();
            int reads = inner.reads.get();
            assertThat(read(c, K64, K64)).as("a whole block written is kept").isEqualTo(b);
            assertThat(inner.reads.get()).isEqualTo(reads);
            c.flush();
            assertThat(inner.flushes.get()).isEqualTo(1);
        }
    }

    @Test
    void unsafeIgnoresFlushAndFuaButWritesBackWhenItCloses() throws IOException {
        CountingBackend inner = new CountingBackend(1 << 20);
        byte[] a = pattern(1, 3 * K64);
        try (CacheFilter c = cache(inner, "cache", "unsafe")) {
            write(c, 1000, a, true);
            c.flush();
            assertThat(inner.writes.get()).isZero();
            assertThat(inner.flushes.get()).isZero();
            assertThat(inner.bytes(1000, a.length)).containsOnly(0);
        }
        assertThat(inner.bytes(1000, a.length)).as("written back on close").isEqualTo(a);
        assertThat(inner.closes.get()).isEqualTo(1);
    }

    @Test
    void cacheOnReadKeepsWhatItReadsAndOnlyThen() throws IOException {
        CountingBackend inner = new CountingBackend(1 << 20);
        write(inner, 0, pattern(1, 1 << 20), false);
        try (CacheFilter off = cache(inner)) {
            read(off, 100, 200);
            read(off, 100, 200);
            assertThat(inner.reads.get()).as("without cache-on-read every read reaches the backend").isEqualTo(2);
        }
        inner.reads.set(0);
        try (CacheFilter on = cache(inner, "cache-on-read", "true")) {
            assertThat(read(on, 100, 200)).isEqualTo(java.util.Arrays.copyOfRange(pattern(1, 1 << 20), 100, 300));
            assertThat(read(on, 3 * K64 + 5, 2 * K64)).isEqualTo(java.util.Arrays.copyOfRange(pattern(1, 1 << 20), 3 * K64 + 5, 5 * K64 + 5));
            int reads = inner.reads.get();
            assertThat(read(on, 0, K64)).isEqualTo(java.util.Arrays.copyOf(pattern(1, 1 << 20), K64));
            assertThat(read(on, 3 * K64, 3 * K64)).isEqualTo(java.util.Arrays.copyOfRange(pattern(1, 1 << 20), 3 * K64, 6 * K64));
            assertThat(inner.reads.get()).as("read again: from the cache").isEqualTo(reads);
        }
        Path flag = dir.resolve("warm");
        inner.reads.set(0);
        try (CacheFilter path = cache(inner, "cache-on-read", flag.toString())) {
            read(path, 0, 100);
            read(path, 0, 100);
            assertThat(inner.reads.get()).as("the path does not exist: nothing kept").isEqualTo(2);
            Files.createFile(flag);
            read(path, 0, 100);
            read(path, 0, 100);
            assertThat(inner.reads.get()).as("the path exists: kept").isEqualTo(3);
        }
    }

    @Test
    void overAReadOnlyBackendItKeepsReadsAndNeverWrites() throws IOException {
        CountingBackend inner = new CountingBackend(1 << 20, EnumSet.of(Capability.FLUSH, Capability.EXTENTS), Set.of());
        try (CacheFilter c = cache(inner, "cache-on-read", "true")) {
            assertThat(c.capabilities()).doesNotContain(Capability.WRITE, Capability.FUA, Capability.TRIM, Capability.ZERO, Capability.MULTI_CONN);
            read(c, 10, 100);
            read(c, 10, 100);
            assertThat(inner.reads.get()).isEqualTo(1);
            c.flush();
        }
        assertThat(inner.writes.get()).isZero();
    }

    @Test
    void aCacheRequestFillsTheCacheWhateverCacheOnReadSays() throws IOException {
        CountingBackend inner = new CountingBackend(1 << 20);
        try (CacheFilter c = cache(inner)) {
            c.cache(K64 + 10, K64);
            assertThat(c.residentBlocks()).isEqualTo(2);
            int reads = inner.reads.get();
            read(c, K64, 2 * K64);
            assertThat(inner.reads.get()).isEqualTo(reads);
        }
    }

    @Test
    void evictionKeepsTheCacheWithinItsMaximumAndWritesDirtyBlocksBackFirst() throws IOException {
        int size = 8 << 20;
        CountingBackend inner = new CountingBackend(size);
        byte[] data = pattern(7, size);
        try (CacheFilter c = cache(inner, "cache-max-size", "1M", "cache-on-read", "true")) {
            long maxBlocks = (1 << 20) / K64;
            for (int off = 0; off < size; off += 48 * 1024) {
                int n = Math.min(48 * 1024, size - off);
                write(c, off, java.util.Arrays.copyOfRange(data, off, off + n), false);
                assertThat(c.residentBlocks()).as("after a write at %d", off).isLessThanOrEqualTo(maxBlocks);
                long fileBytes = c.fileBytes();
                if (fileBytes >= 0) assertThat(fileBytes).as("the cache file's data after a write at %d", off).isLessThanOrEqualTo(maxBlocks * K64);
            }
            assertThat(c.residentBlocks()).isGreaterThan(0);
            assertThat(inner.writes.get()).as("evicted dirty blocks were written back").isGreaterThan(0);
            for (int off = 0; off < size; off += 100_000) {
                int n = Math.min(100_000, size - off);
                assertThat(read(c, off, n)).as("read back at %d", off).isEqualTo(java.util.Arrays.copyOfRange(data, off, off + n));
                assertThat(c.residentBlocks()).isLessThanOrEqualTo(maxBlocks);
            }
            c.flush();
            assertThat(inner.bytes(0, size)).isEqualTo(data);
        }
    }

    @Test
    void blockStatusCallsADirtyBlockDataWhereTheBackendStillHasAHole() throws IOException {
        CountingBackend inner = new CountingBackend(4 << 20);
        try (CacheFilter c = cache(inner, "cache-min-block-size", "4K")) {
            assertThat(c.extents(0, 4 << 20)).containsExactly(new Extent(4 << 20, true, true));
            write(c, 8192 + 100, pattern(1, 10), false);
            assertThat(c.extents(0, 4 << 20)).containsExactly(new Extent(8192, true, true), new Extent(4096, false, false),
                new Extent((4 << 20) - 12288, true, true));
            c.flush();
            assertThat(c.extents(0, 1 << 20)).as("written back: the backend's own answer").isEqualTo(inner.extents(0, 1 << 20));
        }
    }

    @Test
    void zeroAndTrimReachTheBackendAtOnceAndDropTheBlocksTheyCoverWhole() throws IOException {
        CountingBackend inner = new CountingBackend(1 << 20);
        try (CacheFilter c = cache(inner)) {
            byte[] a = pattern(1, 4 * K64);
            write(c, 0, a, false);
            c.zero(K64 - 100, K64 + 200, false, false, false);
            assertThat(inner.zeroes.get()).isEqualTo(1);
            byte[] expected = a.clone();
            java.util.Arrays.fill(expected, K64 - 100, 2 * K64 + 100, (byte) 0);
            assertThat(read(c, 0, 4 * K64)).isEqualTo(expected);
            assertThat(c.residentBlocks()).as("block 1 dropped; 0 and 2 zeroed in part").isEqualTo(3);

            c.trim(3 * K64 - 10, K64 + 10, false);
            assertThat(inner.trims.get()).isEqualTo(1);
            assertThat(c.residentBlocks()).isEqualTo(2);
            assertThat(read(c, 2 * K64, K64 - 10)).as("the stored part the trim covers in part stays")
                .isEqualTo(java.util.Arrays.copyOfRange(expected, 2 * K64, 3 * K64 - 10));
            c.zero(0, 0, false, false, false);
            c.trim(0, 0, false);
            c.cache(0, 0);
            assertThat(c.residentBlocks()).as("requests of no bytes change nothing").isEqualTo(2);
            c.flush();
            assertThat(inner.bytes(0, 3 * K64 - 10)).isEqualTo(java.util.Arrays.copyOf(expected, 3 * K64 - 10));
        }
    }
}
