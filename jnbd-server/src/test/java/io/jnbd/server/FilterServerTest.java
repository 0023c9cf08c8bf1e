package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.ProbeFilterFactory;
import io.jnbd.server.filter.AsyncMemory;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import java.nio.file.Path;

/**
 * Filters through a real server and a client on the wire: the error a filter injects is the one the client gets, a
 * delay is at least what was asked (lower bounds only), an asynchronous backend keeps working behind them, and the
 * order of a stack decides which filter a request meets first.
 */
@Timeout(60)
class FilterServerTest {

    private static ServerFixture serving(String... specs) throws IOException {
        List<Export> exports = new ArrayList<>();
        for (String s : specs) exports.add(ExportSpec.parse(s).openExport());
        return new ServerFixture(exports);
    }

    @Test
    void theClientGetsExactlyTheInjectedError() throws IOException {
        try (ServerFixture f = serving("e=memory:1M,filter=error,error=ENOSPC,error-pwrite-rate=100%,error-zero=EPERM,error-zero-rate=1");
             RawClient c = f.open("e")) {
            assertThat(c.write(0, new byte[4096], 0)).isEqualTo(Nbd.ENOSPC);
            assertThat(c.command(Nbd.CMD_WRITE_ZEROES, 0, 0, 4096)).isEqualTo(Nbd.EPERM);
            assertThat(c.read(0, 4096)).as("reads go through").isEqualTo(new byte[4096]);
            assertThat(c.command(Nbd.CMD_FLUSH, 0, 0, 0)).isZero();
        }
    }

    /**
     * No data path skips a filter: a cached file's reads would leave by sendfile, a direct file's large reads are
     * split, a memory export's run on the connection's thread; behind the error filter every one of them fails.
     */
    @ParameterizedTest
    @ValueSource(strings = {"size=8M,mode=cached", "size=8M,mode=direct", "memory"})
    void everyReadPathGoesThroughTheFilter(String kind, @TempDir Path dir) throws IOException {
        String backend = kind.equals("memory") ? "memory:8M" : "file:" + dir.resolve("f.img") + "," + kind;
        try (ServerFixture f = serving("plain=" + backend, "e=" + backend + ",filter=error,error-pread-rate=100%,error-pread=EOVERFLOW,"
                + "filter=delay,delay-read=0");
             RawClient plain = f.open("plain", true, false); RawClient e = f.open("e", true, false)) {
            byte[] data = ServerFixture.pattern(3, 4 << 20);
            assertThat(plain.write(0, data, 0)).isZero();
            assertThat(e.write(4 << 20, data, 0)).as("writes pass").isZero();
            assertThat(plain.read(0, 4 << 20)).isEqualTo(data);
            if (!kind.equals("memory")) assertThat(plain.read(4 << 20, 4 << 20)).as("the write through the filter").isEqualTo(data);
            assertThat(e.readError(0, 0, 4096)).isEqualTo(Nbd.EOVERFLOW);
            assertThat(e.readError(0, 0, 4 << 20)).as("a read long enough to be split").isEqualTo(Nbd.EOVERFLOW);
        }
    }

    /**
     * The rate filter on every data path (a cached file's sendfile, a direct file's split reads and writes, memory on
     * the connection's thread, an asynchronous backend): the bytes come back as written, and the export's buckets
     * counted every byte the clients moved, so no path went round the filter. Rates high enough that nothing waits.
     */
    @ParameterizedTest
    @ValueSource(strings = {"size=16M,mode=cached", "size=16M,mode=direct", "memory", "async"})
    void everyPathGoesThroughTheRateFilterWithItsBytesIntact(String kind, @TempDir Path dir) throws IOException {
        String limits = ",filter=rate,rate=4G,connection-rate=4G";
        Export export = switch (kind) {
            case "memory" -> ExportSpec.parse("r=memory:16M" + limits).openExport();
            case "async" -> new Export("r", "", ExportSpec.parse("r=memory:16M" + limits).wrap(new AsyncMemory(16 << 20)));
            default -> ExportSpec.parse("r=file:" + dir.resolve("f.img") + "," + kind + limits).openExport();
        };
        io.jnbd.server.filter.RateFilter rate = io.jnbd.server.backend.FilterBackend.find(export.backend(), io.jnbd.server.filter.RateFilter.class);
        try (ServerFixture f = new ServerFixture(List.of(export));
             RawClient a = f.open("r", true, false); RawClient b = f.open("r", true, false)) {
            byte[] large = ServerFixture.pattern(4, 4 << 20), small = ServerFixture.pattern(5, 4096);
            assertThat(a.write(0, large, 0)).isZero();
            assertThat(b.write(8 << 20, small, 0)).isZero();
            assertThat(b.read(0, 4 << 20)).as("a's write, read on b").isEqualTo(large);
            assertThat(a.read(8 << 20, 4096)).isEqualTo(small);
            assertThat(a.read(1 << 20, 512)).isEqualTo(java.util.Arrays.copyOfRange(large, 1 << 20, (1 << 20) + 512));
            assertThat(a.command(Nbd.CMD_WRITE_ZEROES, 0, 12 << 20, 1 << 20)).isZero();
            assertThat(rate.bytesWritten()).as("written through the filter").isEqualTo((4 << 20) + 4096);
            assertThat(rate.bytesRead()).as("read through the filter, sendfile or not").isEqualTo((4 << 20) + 4096 + 512);
        }
    }

    @Test
    void aRangeFailsExactlyOneRequestOfMany() throws IOException {
        try (ServerFixture f = serving("e=memory:1M,filter=error,error-pread-rate=1,error-offset=40K,error-length=1");
             RawClient c = f.open("e")) {
            for (int i = 0; i < 64; i++) {
                // read() fails the test on any error; readError() on none
                if (i == 10) assertThat(c.readError(0, i * 4096L, 4096)).isEqualTo(Nbd.EIO);
                else assertThat(c.read(i * 4096L, 4096)).hasSize(4096);
            }
        }
    }

    @Test
    void aDelayedRequestTakesAtLeastTheDelay() throws IOException {
        try (ServerFixture f = serving("d=memory:1M,filter=delay,delay-read=300ms,wdelay=200ms"); RawClient c = f.open("d")) {
            byte[] data = ServerFixture.pattern(1, 8192);
            long start = System.nanoTime();
            assertThat(c.write(4096, data, 0)).isZero();
            assertThat((System.nanoTime() - start) / 1_000_000).isGreaterThanOrEqualTo(200);
            start = System.nanoTime();
            assertThat(c.read(4096, 8192)).isEqualTo(data);
            assertThat((System.nanoTime() - start) / 1_000_000).isGreaterThanOrEqualTo(300);
        }
    }

    @Test
    void anAsynchronousBackendWorksBehindDelayAndError() throws IOException {
        AsyncMemory pool = new AsyncMemory(1 << 20);
        Backend chain = ExportSpec.parse("a=memory:1M,filter=delay,delay-read=200ms,filter=error,error=ENOMEM,error-pwrite-rate=1,"
            + "error-offset=64K,error-length=4K").wrap(pool);
        assertThat(chain.traits()).contains(Backend.Trait.ASYNC).doesNotContain(Backend.Trait.ZERO_COPY, Backend.Trait.NEVER_BLOCKS);
        try (ServerFixture f = new ServerFixture(List.of(new Export("a", "", chain))); RawClient c = f.open("a")) {
            byte[] data = ServerFixture.pattern(2, 4096);
            assertThat(c.write(0, data, 0)).isZero();
            assertThat(c.write(64 << 10, data, 0)).isEqualTo(Nbd.ENOMEM);
            long start = System.nanoTime();
            assertThat(c.read(0, 4096)).isEqualTo(data);
            assertThat((System.nanoTime() - start) / 1_000_000).isGreaterThanOrEqualTo(200);
            assertThat(c.read(64 << 10, 4096)).as("the failed write wrote nothing").isEqualTo(new byte[4096]);
            assertThat(pool.asyncCalls.get()).as("reads and writes went down the asynchronous path").isGreaterThanOrEqualTo(3);
        }
    }

    /**
     * Three filters, readonly, error and a probe that counts what reaches it, in different orders. Called on the chain,
     * a write meets whichever of readonly and error is outermost; through the server, any read-only stack makes the
     * export read-only (its transmission flags say so) and the protocol edge refuses writes before the chain. For reads,
     * the probe counts them only where it stands in front of the error filter.
     */
    @Test
    void theOrderOfAStackDecidesWhatARequestMeetsFirst() throws IOException {
        String errors = "filter=error,error=ENOSPC,error-pwrite-rate=1,error-pread-rate=1,error-pread=EIO";
        Backend readonlyFirst = ExportSpec.parse("a=memory:1M,filter=readonly," + errors + ",filter=probe,probe=a").open();
        Backend errorFirst = ExportSpec.parse("b=memory:1M," + errors + ",filter=readonly,filter=probe,probe=b").open();
        assertThat(write(readonlyFirst)).isEqualTo(Nbd.EPERM);
        assertThat(write(errorFirst)).isEqualTo(Nbd.ENOSPC);
        assertThat(ProbeFilterFactory.WRITES.get("a").get() + ProbeFilterFactory.WRITES.get("b").get()).isZero();

        try (ServerFixture f = serving("c=memory:1M,filter=probe,probe=c," + errors + ",filter=readonly",
                "d=memory:1M," + errors + ",filter=probe,probe=d,filter=readonly",
                "e=memory:1M," + errors + ",filter=readonly,filter=probe,probe=e");
             RawClient c = f.open("c"); RawClient d = f.open("d"); RawClient e = f.open("e")) {
            for (RawClient client : List.of(c, d, e)) {
                assertThat(client.transmissionFlags & Nbd.FLAG_READ_ONLY).isNotZero();
                assertThat(client.write(0, new byte[512], 0)).as("refused at the edge").isEqualTo(Nbd.EPERM);
                assertThat(client.readError(0, 0, 512)).isEqualTo(Nbd.EIO);
            }
            assertThat(ProbeFilterFactory.READS.get("c").get()).as("the probe in front of error saw the read").isEqualTo(1);
            assertThat(ProbeFilterFactory.READS.get("d").get()).as("the probe behind error saw nothing").isZero();
            assertThat(ProbeFilterFactory.WRITES.get("c").get() + ProbeFilterFactory.WRITES.get("d").get()
                + ProbeFilterFactory.WRITES.get("e").get()).isZero();
        }
    }

    private static int write(Backend b) {
        try {
            b.write(0, java.nio.ByteBuffer.allocate(512), false);
            return 0;
        } catch (io.jnbd.server.backend.NbdErrorException e) {
            return e.error();
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }
}
