package io.jnbd.proxy;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.Extent;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;
import io.jnbd.protocol.Nbd;
import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.RawClient;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.Set;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * An {@code nbd:} export in front of an in-process jnbd server, through jnbd's client: data of every size reaches
 * the upstream and comes back, the upstream's trim, zero, flush and block status pass through, a read-only
 * upstream makes a read-only export, and the upstream's multi-conn is used.
 */
@Timeout(120)
class ProxyExportTest {
    private static final long SIZE = 64L << 20;
    private final List<NbdServer> servers = new ArrayList<>();
    private final List<Export> exports = new ArrayList<>();

    @AfterEach
    void stop() {
        for (NbdServer s : servers.reversed()) s.stop(Duration.ofSeconds(5));
    }

    /** A server with the exports given as {@code NAME=SPEC}, listening on a free loopback port. */
    InetSocketAddress serve(String... specs) throws IOException {
        List<Export> exports = new ArrayList<>();
        for (String s : specs) exports.add(ExportSpec.parse(s).openExport());
        this.exports.addAll(exports);
        NbdServer server = new NbdServer(new Exports(exports, null), ServerConfig.defaults());
        servers.add(server);
        return (InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0));
    }

    Export export(String name) {
        return exports.stream().filter(e -> e.name().equals(name)).findFirst().orElseThrow();
    }

    static String uri(InetSocketAddress a, String export) {
        return "nbd://127.0.0.1:" + a.getPort() + "/" + export;
    }

    static NbdClient client(InetSocketAddress a, String export) throws IOException {
        return NbdClient.connect(NbdUri.parse(uri(a, export)), ClientOptions.defaults().withRequestTimeout(Duration.ofSeconds(60)));
    }

    static byte[] pattern(long seed, int n) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

    static byte[] read(NbdClient c, long offset, int length) throws IOException {
        ByteBuffer buf = ByteBuffer.allocateDirect(length);
        c.blocking().read(offset, buf);
        byte[] out = new byte[length];
        buf.flip().get(out);
        return out;
    }

    @Test
    void dataOfEverySizeGoesThroughToTheUpstreamAndBack() throws Exception {
        InetSocketAddress up = serve("m=memory:64M");
        InetSocketAddress proxy = serve("p=nbd:" + uri(up, "m"));
        try (NbdClient p = client(proxy, "p"); NbdClient direct = client(up, "m")) {
            assertThat(p.size()).isEqualTo(SIZE);
            // From a sector to past the server's own 4 MiB pieces, at odd sector offsets.
            int[] sizes = {512, 4096, 65536 + 512, 1 << 20, 4 << 20, 12 << 20};
            long at = 3 * 512;
            for (int i = 0; i < sizes.length; i++) {
                byte[] data = pattern(i, sizes[i]);
                p.blocking().write(at, ByteBuffer.wrap(data), i % 2 == 0);
                assertThat(read(direct, at, sizes[i])).as("upstream has the %d bytes at %d", sizes[i], at).isEqualTo(data);
                assertThat(read(p, at, sizes[i])).as("%d bytes at %d read back through the proxy", sizes[i], at).isEqualTo(data);
                at += sizes[i] + 7 * 512;
            }
            // Many reads in flight at once, each in its own buffer.
            List<ByteBuffer> bufs = new ArrayList<>();
            List<java.util.concurrent.CompletableFuture<Void>> reads = new ArrayList<>();
            for (int i = 0; i < 64; i++) {
                ByteBuffer b = ByteBuffer.allocateDirect(4096);
                bufs.add(b);
                reads.add(p.read(3 * 512 + 4096L * (i % 8), b));
            }
            java.util.concurrent.CompletableFuture.allOf(reads.toArray(java.util.concurrent.CompletableFuture[]::new)).join();
            byte[] whole = read(direct, 3 * 512, 8 * 4096);
            for (int i = 0; i < 64; i++) {
                byte[] got = new byte[4096];
                bufs.get(i).flip().get(got);
                assertThat(got).isEqualTo(java.util.Arrays.copyOfRange(whole, 4096 * (i % 8), 4096 * (i % 8 + 1)));
            }
        }
    }

    @Test
    void trimZeroFlushAndBlockStatusPassThrough() throws Exception {
        InetSocketAddress up = serve("m=memory:64M");
        InetSocketAddress proxy = serve("p=nbd:" + uri(up, "m"));
        try (NbdClient p = client(proxy, "p"); NbdClient direct = client(up, "m")) {
            assertThat(p.info().canTrim()).isEqualTo(direct.info().canTrim()).isTrue();
            assertThat(p.info().canWriteZeroes()).isEqualTo(direct.info().canWriteZeroes()).isTrue();
            assertThat(p.info().canFlush()).isEqualTo(direct.info().canFlush()).isTrue();
            assertThat(p.info().baseAllocation()).isTrue();

            p.blocking().write(0, ByteBuffer.wrap(pattern(1, 4 << 20)), false);
            p.blocking().writeZeroes(1 << 20, 1 << 20, false, false, false);
            p.blocking().trim(3 << 20, 1 << 20, false);
            p.blocking().flush();

            assertThat(read(direct, 1 << 20, 1 << 20)).as("zeroed upstream").containsOnly(0);
            assertThat(read(direct, 0, 1 << 20)).isEqualTo(java.util.Arrays.copyOfRange(pattern(1, 4 << 20), 0, 1 << 20));
            List<Extent> throughProxy = p.blocking().extents(0, SIZE);
            List<Extent> upstream = direct.blocking().extents(0, SIZE);
            assertThat(throughProxy).as("the upstream's block status, as it reports it").isEqualTo(upstream);
            assertThat(throughProxy.getFirst().hole()).as("written data").isFalse();
            assertThat(throughProxy.getLast().hole()).as("never written").isTrue();
        }
    }

    @Test
    void aReadOnlyUpstreamMakesAReadOnlyExportThatRefusesWritesWithEperm() throws Exception {
        InetSocketAddress up = serve("ro=memory:16M,readonly");
        InetSocketAddress proxy = serve("ro=nbd:" + uri(up, "ro"));
        try (RawClient c = RawClient.open(proxy, "ro", true, false)) {
            assertThat(c.transmissionFlags & Nbd.FLAG_READ_ONLY).as("NBD_FLAG_READ_ONLY").isNotZero();
            assertThat(c.transmissionFlags & (Nbd.FLAG_SEND_TRIM | Nbd.FLAG_SEND_WRITE_ZEROES | Nbd.FLAG_SEND_FUA)).isZero();
            assertThat(c.write(0, pattern(3, 4096), 0)).as("WRITE").isEqualTo(Nbd.EPERM);
            assertThat(c.command(Nbd.CMD_TRIM, 0, 0, 4096)).as("TRIM").isEqualTo(Nbd.EPERM);
            assertThat(c.read(0, 4096)).as("reads are served").containsOnly(0);
        }
    }

    @Test
    void theUpstreamsMultiConnIsUsed() throws Exception {
        InetSocketAddress up = serve("m=memory:16M");
        NbdServer upstream = servers.getFirst();
        InetSocketAddress proxy = serve("p=nbd:" + uri(up, "m") + ",connections=3");
        try (NbdClient p = client(proxy, "p")) {
            assertThat(upstream.connectionCount()).as("proxy's connections to a CAN_MULTI_CONN upstream").isEqualTo(3);
            assertThat(p.info().canMultiConn()).isTrue();
            // Requests spread over the three: all of them are served.
            for (int i = 0; i < 16; i++) p.blocking().write(i * 65536L, ByteBuffer.wrap(pattern(i, 65536)), false);
            for (int i = 0; i < 16; i++) assertThat(read(p, i * 65536L, 65536)).isEqualTo(pattern(i, 65536));
        }
    }

    @Test
    void anUpstreamWithoutMultiConnGetsOneConnection() throws Exception {
        Backend memory = ExportSpec.parse("s=memory:16M").open();
        Backend single = new FilterBackend(memory) {
            @Override
            public Set<Capability> capabilities() {
                Set<Capability> c = EnumSet.copyOf(inner.capabilities());
                c.remove(Capability.MULTI_CONN);
                return c;
            }
        };
        NbdServer upstream = new NbdServer(new Exports(List.of(new Export("s", "", single)), null), ServerConfig.defaults());
        servers.add(upstream);
        InetSocketAddress up = (InetSocketAddress) upstream.listen(new InetSocketAddress("127.0.0.1", 0));
        InetSocketAddress proxy = serve("p=nbd:" + uri(up, "s") + ",connections=4");
        try (NbdClient p = client(proxy, "p"); NbdClient other = client(proxy, "p")) {
            assertThat(upstream.connectionCount()).as("the proxy's connections to an upstream without CAN_MULTI_CONN").isEqualTo(1);
            assertThat(p.info().canMultiConn()).as("the proxy's clients share that one connection").isTrue();
            p.blocking().write(0, ByteBuffer.wrap(pattern(5, 65536)), false);
            assertThat(read(other, 0, 65536)).as("what one client wrote, another reads").isEqualTo(pattern(5, 65536));
        }
    }

    @Test
    void badSpecsAreOneLineAndAnUpstreamThatIsAwayFailsTheOpen() throws Exception {
        assertThatThrownBy(() -> ExportSpec.parse("p=nbd:"))
            .hasMessage("export 'p': nbd: needs the upstream's URI, e.g. nbd:nbd://HOST:PORT/EXPORT");
        assertThatThrownBy(() -> ExportSpec.parse("p=nbd:http://x/y")).hasMessageStartingWith("export 'p': unsupported URI scheme 'http'");
        assertThatThrownBy(() -> ExportSpec.parse("p=nbd:nbd://127.0.0.1/x,connections=0"))
            .hasMessage("export 'p': connections must be a whole number from 1 to 64, not '0'");
        assertThatThrownBy(() -> ExportSpec.parse("p=nbd:nbd://127.0.0.1/x,timeout=soon"))
            .hasMessage("export 'p': timeout must be a duration from 1ms to 1h such as 30s or 500ms, not 'soon'");
        assertThatThrownBy(() -> ExportSpec.parse("p=nbd:nbd://127.0.0.1/x,size=1G"))
            .hasMessage("export 'p': unknown option 'size' for a nbd: export");
        // A part without '=' continues the URI; a comma before key=value is written %2C.
        assertThat(ExportSpec.parse("p=nbd:nbd://127.0.0.1/a,b,timeout=5s").target()).isEqualTo("nbd://127.0.0.1/a,b");
        assertThat(NbdUri.parse(ExportSpec.parse("p=nbd:nbd://127.0.0.1/a%2Cb=c,timeout=5s").target()).exportName()).isEqualTo("a,b=c");
        ExportSpec spec = ExportSpec.parse("p=nbd:nbd://127.0.0.1:1/x,timeout=500ms,connect-timeout=2m,readonly");
        assertThat(spec.readOnly()).isTrue();
        assertThat(NbdBackendFactory.clientOptions(spec.options()).requestTimeout()).isEqualTo(Duration.ofMillis(500));
        assertThat(NbdBackendFactory.clientOptions(spec.options()).connectTimeout()).isEqualTo(Duration.ofMinutes(2));
        // Port 1 on loopback refuses: the export cannot be described, so it is not opened.
        assertThatThrownBy(spec::openExport).isInstanceOf(IOException.class)
            .hasMessageContaining("cannot connect to 127.0.0.1:1");
    }
}
