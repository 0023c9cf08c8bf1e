package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.Backend;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The route a connection's requests take is chosen from the export's whole chain: filters configured to leave reads
 * alone keep the page-cache route (sendfile), and one that acts on reads takes it away, so nothing skips it.
 */
class DataPathTest {

    @TempDir
    Path dir;

    private DataPath.Strategy strategy(String spec, boolean zeroCopyTransport) throws Exception {
        try (Backend chain = ExportSpec.parse("d", spec).open()) {
            Export export = new Export("d", "", chain);
            DataPath path = DataPath.of(export, io.jnbd.server.backend.ConnectionContext.NONE, zeroCopyTransport, Runnable::run, null, null, null, null);
            if (path.zeroCopy()) assertThat(path.zeroCopySource()).isSameAs(chain.pageCache());
            return path.strategy();
        }
    }

    private boolean cachedReads(String spec) throws Exception {
        try (Backend chain = ExportSpec.parse("d", spec).open()) {
            Export export = new Export("d", "", chain);
            return DataPath.of(export, io.jnbd.server.backend.ConnectionContext.NONE, false, Runnable::run, null, null, null, null).cachedReads();
        }
    }

    /**
     * Reads the page cache holds are answered on the connection's thread, under TLS too, through filters that leave
     * reads alone and through cow, which answers them itself from its overlay and its base; never past one that acts.
     */
    @Test
    void readsFromThePageCacheAreTriedOnlyWhereNothingIsSkipped() throws Exception {
        String file = "file:" + dir.resolve("d.img") + ",size=1M";
        assertThat(cachedReads(file)).isTrue();
        assertThat(cachedReads(file + ",filter=delay,filter=readonly")).isTrue();
        assertThat(cachedReads(file + ",filter=cow,cow-dir=" + dir.resolve("cow"))).isTrue();
        assertThat(cachedReads(file + ",filter=delay,delay-read=1ms")).isFalse();
        assertThat(cachedReads(file + ",filter=rate,rate=1M")).isFalse();
        assertThat(cachedReads(file + ",filter=cache")).as("its reads fill the cache").isFalse();
        assertThat(cachedReads("file:" + dir.resolve("e.img") + ",size=1M,mode=direct")).isFalse();
        assertThat(cachedReads("memory:1M")).isFalse();
    }

    @Test
    void passThroughFiltersKeepTheZeroCopyRouteAndActiveOnesTakeItAway() throws Exception {
        String file = "file:" + dir.resolve("d.img") + ",size=1M";
        assertThat(strategy(file, true)).isEqualTo(DataPath.Strategy.PAGE_CACHE);
        assertThat(strategy(file + ",filter=delay,filter=error,error-rate=0,filter=readonly", true))
            .as("three filters that change no read").isEqualTo(DataPath.Strategy.PAGE_CACHE);
        assertThat(strategy(file + ",filter=error,error-pwrite-rate=1", true))
            .as("failing writes only: reads still go by sendfile, writes through the filter").isEqualTo(DataPath.Strategy.PAGE_CACHE);
        assertThat(strategy(file + ",filter=delay,delay-read=1ms", true)).isEqualTo(DataPath.Strategy.BLOCKING);
        assertThat(strategy(file + ",filter=delay,filter=error,error-pread-rate=1", true)).isEqualTo(DataPath.Strategy.BLOCKING);
        assertThat(strategy(file, false)).as("TLS: every byte passes the JVM").isEqualTo(DataPath.Strategy.BLOCKING);
        assertThat(strategy("memory:1M,filter=error,error-rate=10%", true)).isEqualTo(DataPath.Strategy.IN_MEMORY);
        assertThat(strategy("memory:1M,filter=delay,delay-write=1ms", true)).isEqualTo(DataPath.Strategy.BLOCKING);
        assertThat(strategy(file + ",filter=dirty,dirty-bitmap=b0", true))
            .as("dirty bitmaps leave reads alone: sendfile stays, writes go through the filter").isEqualTo(DataPath.Strategy.PAGE_CACHE);
        assertThat(strategy("memory:1M,filter=dirty,dirty-dir=" + dir.resolve("bm"), true))
            .as("over memory no FLUSH waits for the bitmap's file").isEqualTo(DataPath.Strategy.IN_MEMORY);
    }

    /** Where a write of {@code length} bytes with {@code flags} runs on a connection of {@code spec}, four requests in flight. */
    private Placement.Where writePlace(String spec, boolean plainTransport, int flags, long length) throws Exception {
        try (Backend chain = ExportSpec.parse("d", spec).open()) {
            Export export = new Export("d", "", chain);
            DataPath path = DataPath.of(export, io.jnbd.server.backend.ConnectionContext.NONE, plainTransport, Runnable::run, null, null, null, null);
            try {
                BatchScheduler.Op op = new BatchScheduler.Op(Nbd.CMD_WRITE, 0, length, List.of(new Request(flags, Nbd.CMD_WRITE, 1, 0, length)));
                return new Placement(path).where(op, new BatchScheduler.Plan(List.of(op), false), 4);
            } finally {
                path.backend().connectionClosed();
            }
        }
    }

    /**
     * Writes that only land in the page cache are done on the connection's own thread (when a slot is free): a cached
     * file's and a cow overlay's over one; FUA, TLS, a direct file and large writes go to the I/O pool.
     */
    @Test
    void pageCacheWritesStayOnTheReaderThroughCowToo() throws Exception {
        String file = "file:" + dir.resolve("d.img") + ",size=8M";
        String cow = file + ",filter=cow,cow-dir=" + dir.resolve("cow");
        assertThat(writePlace(file, true, 0, 65536)).isEqualTo(Placement.Where.READER_IF_FREE);
        assertThat(writePlace(cow, true, 0, 65536)).as("cow over a cached file").isEqualTo(Placement.Where.READER_IF_FREE);
        assertThat(writePlace(cow, true, Nbd.CMD_FLAG_FUA, 65536)).as("FUA waits for the disk").isEqualTo(Placement.Where.WORKERS);
        assertThat(writePlace(cow, false, 0, 65536)).as("TLS").isEqualTo(Placement.Where.WORKERS);
        assertThat(writePlace(cow, true, 0, 5L << 20)).as("over 4 MiB").isEqualTo(Placement.Where.WORKERS);
        assertThat(writePlace("file:" + dir.resolve("e.img") + ",size=8M,mode=direct", true, 0, 65536))
            .as("O_DIRECT").isEqualTo(Placement.Where.WORKERS);
        assertThat(writePlace(file + ",filter=delay,delay-write=1ms", true, 0, 65536)).as("a filter that waits").isEqualTo(Placement.Where.WORKERS);
    }
}
