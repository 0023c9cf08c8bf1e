package io.jnbd.pool;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.ExportListing;
import io.jnbd.client.Extent;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;
import io.jnbd.pool.memserver.MemServer;
import io.jnbd.protocol.Nbd;
import io.jnbd.server.Export;
import io.jnbd.server.ExportSet;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.RawClient;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.FilterFactories;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.ReadOnlyFilter;
import io.jnbd.server.filter.RateFilter;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.UnaryOperator;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every filter in front of every kind of backend, through jnbd's client over a real server socket: the data path a
 * backend's traits choose (sendfile from a cached file, split direct reads, the reader thread of memory, a pool's
 * asynchronous reads) must still go through the filter and come back with the backend's bytes. Each pair serves
 * one backend twice: {@code rw} as it is, which the test writes through, and {@code ro} behind the filter.
 * This module is the one that sees every kind of backend, the pool included.
 */
@Timeout(120)
class FilterMatrixTest {
    static final long SIZE = 64L << 20;
    static final long SMALL_AT = 0;
    static final int SMALL = 4096;
    /** Large enough that a direct file splits it into chunks and a pool reads it from two extents at once. */
    static final long LARGE_AT = (8L << 20) + 4096;
    static final int LARGE = 4 << 20;

    @TempDir
    Path dir;

    /** A filter as a server puts it in front of a backend, and what it promises beyond passing reads through. */
    record Filter(String name, UnaryOperator<Backend> wrap, Promise promise) {
        @Override public String toString() { return name; }
    }

    interface Promise {
        /** Checks the filter's own behaviour on export {@code ro}; {@code rw} serves the same backend unfiltered. */
        void check(InetSocketAddress server) throws Exception;
    }

    /** Every filter there is. A new one belongs here, with what it promises. */
    static List<Filter> filters() {
        return List.of(
            new Filter("readonly", ReadOnlyFilter::new, FilterMatrixTest::refusesEveryWriteWithEperm),
            new Filter("delay", b -> filter("delay", b, Map.of("delay-read", DELAY_MS + "ms")), FilterMatrixTest::delaysReads),
            new Filter("error", b -> filter("error", b, Map.of("error-pread", "EIO", "error-pread-rate", "100%",
                "error-offset", Long.toString(ERROR_AT), "error-length", "4096")), FilterMatrixTest::failsReadsInItsRangeOnly),
            new Filter("rate", FilterMatrixTest::rate, FilterMatrixTest::countsEveryByteItPasses),
            new Filter("cache", b -> filter("cache", b, Map.of("cache-on-read", "true", "cache-max-size", "1M")),
                FilterMatrixTest::keepsWritesUntilAFlush));
    }

    /** How long the delay filter holds each read. */
    static final int DELAY_MS = 30;
    /** Where the error filter fails reads: away from what the matrix writes and reads. */
    static final long ERROR_AT = 32L << 20;
    /** Where the filters' own checks write: away from the rest too. */
    static final long SCRATCH_AT = 40L << 20;

    /** The rate filter the matrix built last: its export-wide buckets count the bytes that passed it. */
    static final AtomicReference<RateFilter> RATE = new AtomicReference<>();

    /** Rates no test reaches (4 Gbit/s, 1 GiB of burst): nothing waits, but every byte is counted. */
    static Backend rate(Backend inner) {
        RateFilter r = (RateFilter) filter("rate", inner, Map.of("rate", "4G", "connection-rate", "4G"));
        RATE.set(r);
        return r;
    }

    static Backend filter(String name, Backend inner, Map<String, String> options) {
        return FilterFactories.of(name).wrap(inner, new BackendOptions(options));
    }

    enum Kind {
        FILE_CACHED, FILE_DIRECT, MEMORY, POOL;

        String spec(Path dir, TestCluster pool) throws Exception {
            return switch (this) {
                case FILE_CACHED -> "file:" + dir.resolve("cached.img") + ",size=64M,mode=cached";
                case FILE_DIRECT -> "file:" + dir.resolve("direct.img") + ",size=64M,mode=direct";
                case MEMORY -> "memory:64M";
                case POOL -> "pool:" + String.join(",", pool.addresses()) + ",size=64M,replicas=2";
            };
        }
    }

    static Stream<Arguments> matrix() {
        return filters().stream().flatMap(f -> Stream.of(Kind.values()).map(k -> Arguments.of(f, k)));
    }

    @ParameterizedTest(name = "{0} over {1}")
    @MethodSource("matrix")
    void aFilterPassesReadsAndBlockStatusOfEveryBackendAndKeepsItsPromise(Filter filter, Kind kind) throws Exception {
        try (TestCluster pool = kind == Kind.POOL ? new TestCluster(2, MemServer.Config.ofMemory(64L << 20)) : null) {
            ExportSpec spec = ExportSpec.parse("rw", kind.spec(dir, pool));
            Backend backend = spec.open();
            NbdServer server;
            try {
                // The server closes exports in order: rw leaves the backend open, ro (its filter) closes it.
                server = new NbdServer(new Exports(List.of(new Export("rw", "", new LeftOpen(backend), spec.tuning()),
                    new Export("ro", "", filter.wrap().apply(backend), spec.tuning())), null), ServerConfig.defaults());
            } catch (RuntimeException e) {
                backend.close();
                throw e;
            }
            try {
                InetSocketAddress a = (InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0));
                byte[] small = pattern(1, SMALL), large = pattern(2, LARGE);
                try (NbdClient rw = client(a, "rw")) {
                    rw.blocking().write(SMALL_AT, ByteBuffer.wrap(small), false);
                    rw.blocking().write(LARGE_AT, ByteBuffer.wrap(large), false);
                    rw.blocking().flush();
                }
                try (NbdClient ro = client(a, "ro"); NbdClient rw = client(a, "rw")) {
                    assertThat(read(ro, SMALL_AT, SMALL)).as("%d bytes at %d", SMALL, SMALL_AT).isEqualTo(small);
                    assertThat(read(ro, LARGE_AT, LARGE)).as("%d bytes at %d", LARGE, LARGE_AT).isEqualTo(large);
                    assertThat(read(ro, SIZE - SMALL, SMALL)).as("never written").containsOnly(0);
                    ro.blocking().cache(0, SMALL);
                    ro.blocking().flush();

                    List<Extent> map = ro.blocking().extents(0, SIZE);
                    assertThat(map.getFirst().offset()).isZero();
                    assertThat(map.getLast().end()).as("block status covers the export").isEqualTo(SIZE);
                    assertThat(flagsAt(map, SMALL_AT) & Nbd.STATE_HOLE).as("written at %d: data", SMALL_AT).isZero();
                    assertThat(flagsAt(map, LARGE_AT) & Nbd.STATE_HOLE).as("written at %d: data", LARGE_AT).isZero();
                    assertThat(map).as("block status as the backend itself reports it").isEqualTo(rw.blocking().extents(0, SIZE));
                }
                filter.promise().check(a);
                try (NbdClient rw = client(a, "rw")) {
                    assertThat(read(rw, SMALL_AT, SMALL)).as("the backend after the filter's checks").isEqualTo(small);
                }
            } finally {
                server.stop(Duration.ofSeconds(5));
            }
        }
    }

    /** The export is read-only on the wire, and the server refuses WRITE, TRIM and WRITE_ZEROES sent all the same. */
    static void refusesEveryWriteWithEperm(InetSocketAddress server) throws Exception {
        try (RawClient c = RawClient.open(server, "ro", true, false)) {
            assertThat(c.transmissionFlags & Nbd.FLAG_READ_ONLY).as("NBD_FLAG_READ_ONLY").isNotZero();
            assertThat(c.transmissionFlags & (Nbd.FLAG_SEND_TRIM | Nbd.FLAG_SEND_WRITE_ZEROES | Nbd.FLAG_SEND_FUA)).isZero();
            assertThat(c.write(SMALL_AT, pattern(3, SMALL), 0)).as("WRITE").isEqualTo(Nbd.EPERM);
            assertThat(c.write(LARGE_AT, pattern(4, LARGE), 0)).as("a large WRITE").isEqualTo(Nbd.EPERM);
            assertThat(c.command(Nbd.CMD_TRIM, 0, SMALL_AT, SMALL)).as("TRIM").isEqualTo(Nbd.EPERM);
            assertThat(c.command(Nbd.CMD_WRITE_ZEROES, 0, SMALL_AT, SMALL)).as("WRITE_ZEROES").isEqualTo(Nbd.EPERM);
            assertThat(c.read(SMALL_AT, SMALL)).as("the connection still serves reads").isEqualTo(pattern(1, SMALL));
        }
    }

    /** Reads wait at least the delay; writes pass as they are (the filter delays reads only here). */
    static void delaysReads(InetSocketAddress server) throws Exception {
        try (RawClient c = RawClient.open(server, "ro", true, false)) {
            assertThat(c.write(SCRATCH_AT, pattern(5, SMALL), 0)).as("WRITE through delay").isZero();
            long start = System.nanoTime();
            assertThat(c.read(SCRATCH_AT, SMALL)).isEqualTo(pattern(5, SMALL));
            assertThat(Duration.ofNanos(System.nanoTime() - start)).as("a read behind delay-read=%dms", DELAY_MS)
                .isGreaterThanOrEqualTo(Duration.ofMillis(DELAY_MS));
        }
    }

    /** Reads touching the error range fail with its errno, on whatever path the backend's reads take; the rest pass. */
    static void failsReadsInItsRangeOnly(InetSocketAddress server) throws Exception {
        try (RawClient c = RawClient.open(server, "ro", true, false)) {
            assertThat(c.readError(0, ERROR_AT, SMALL)).as("a read in the error range").isEqualTo(Nbd.EIO);
            assertThat(c.readError(0, ERROR_AT - (2 << 20), 4 << 20)).as("a large read across it").isEqualTo(Nbd.EIO);
            assertThat(c.read(ERROR_AT + SMALL, SMALL)).as("just past the range").containsOnly(0);
            assertThat(c.write(ERROR_AT, pattern(6, SMALL), 0)).as("writes are not in error-pread's rule").isZero();
        }
    }

    /** Every byte read or written passed the filter's buckets, on whatever path the backend's reads and writes take. */
    static void countsEveryByteItPasses(InetSocketAddress server) throws Exception {
        RateFilter r = RATE.get();
        long read = r.bytesRead(), written = r.bytesWritten();
        try (RawClient c = RawClient.open(server, "ro", true, false)) {
            assertThat(c.write(SCRATCH_AT, pattern(7, LARGE), 0)).as("WRITE through rate").isZero();
            assertThat(c.read(SCRATCH_AT, LARGE)).isEqualTo(pattern(7, LARGE));
            assertThat(c.read(SMALL_AT, SMALL)).isEqualTo(pattern(1, SMALL));
            assertThat(c.command(Nbd.CMD_WRITE_ZEROES, 0, SCRATCH_AT, SMALL)).as("zeroes pass free").isZero();
        }
        assertThat(r.bytesWritten() - written).as("bytes written through the filter").isEqualTo(LARGE);
        assertThat(r.bytesRead() - read).as("bytes read through the filter").isEqualTo(LARGE + SMALL);
    }

    /**
     * Writes through the cache (writeback, its default) reach the backend, which export {@code rw} serves unfiltered,
     * only with a flush; reads through the cache see them at once. The write covers part of a block.
     */
    static void keepsWritesUntilAFlush(InetSocketAddress server) throws Exception {
        byte[] data = pattern(7, SMALL);
        long at = SCRATCH_AT + 512;
        try (RawClient c = RawClient.open(server, "ro", true, false); NbdClient rw = client(server, "rw")) {
            assertThat(c.write(at, data, 0)).as("WRITE through cache").isZero();
            assertThat(c.read(at, SMALL)).isEqualTo(data);
            assertThat(read(rw, at, SMALL)).as("the backend before a flush").containsOnly(0);
            assertThat(c.command(Nbd.CMD_FLUSH, 0, 0, 0)).as("FLUSH").isZero();
            assertThat(read(rw, at, SMALL)).as("the backend after the flush").isEqualTo(data);
        }
    }

    /**
     * The case as a user gives it, {@code ro=pool:A,B,size=64M,replicas=2,readonly}: a fresh pool reads as
     * zeroes, and its status export stays (it belongs to the pool, not to the read-only filter in front of it).
     */
    @Test
    void aReadOnlyPoolExportOpenedFromItsSpecReadsAndReportsItsStatus() throws Exception {
        try (TestCluster pool = new TestCluster(2, MemServer.Config.ofMemory(16L << 20))) {
            ExportSpec spec = ExportSpec.parse("ro", "pool:" + String.join(",", pool.addresses()) + ",size=64M,replicas=2,readonly");
            ExportSet set = ExportSet.open(List.of(spec), null, null);
            NbdServer server = new NbdServer(set.exports(), ServerConfig.defaults());
            try {
                InetSocketAddress a = (InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0));
                try (NbdClient ro = client(a, "ro")) {
                    assertThat(ro.info().readOnly()).isTrue();
                    assertThat(read(ro, 0, SMALL)).containsOnly(0);
                    assertThat(read(ro, LARGE_AT, LARGE)).containsOnly(0);
                }
                assertThat(FilterBackend.find(set.exports().find("ro").backend(), PoolBackend.class)).isNotNull();
                List<String> names = new ArrayList<>();
                for (ExportListing l : NbdClient.list(URI.create("nbd://127.0.0.1:" + a.getPort()))) names.add(l.name());
                assertThat(names).containsExactlyInAnyOrder("ro", "ro/status");
                try (NbdClient status = client(a, "ro/status")) {
                    String json = new String(read(status, 0, (int) status.size()), StandardCharsets.UTF_8).strip();
                    assertThat(json).startsWith("{").endsWith("}");
                }
            } finally {
                server.stop(Duration.ofSeconds(5));
            }
        }
    }

    /** The writable side of a shared backend: the filtered export closes it. */
    private static final class LeftOpen extends FilterBackend {
        LeftOpen(Backend inner) {
            super(inner);
        }

        @Override public Set<Trait> traits() { return inner.traits(); }
        @Override public void close() {}
    }

    private static NbdClient client(InetSocketAddress a, String export) throws Exception {
        return NbdClient.connect(new NbdUri(URI.create("nbd://127.0.0.1:" + a.getPort() + "/" + export), a, export),
            ClientOptions.defaults().withRequestTimeout(Duration.ofSeconds(30)));
    }

    private static byte[] read(NbdClient c, long offset, int length) throws Exception {
        ByteBuffer b = ByteBuffer.allocateDirect(length);
        c.blocking().read(offset, b);
        byte[] out = new byte[length];
        b.flip().get(out);
        return out;
    }

    private static int flagsAt(List<Extent> map, long offset) {
        return map.stream().filter(e -> e.offset() <= offset && offset < e.end()).findFirst().orElseThrow().flags();
    }

    private static byte[] pattern(long seed, int n) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }
}
