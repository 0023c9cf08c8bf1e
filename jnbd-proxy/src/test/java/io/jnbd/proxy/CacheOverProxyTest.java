package io.jnbd.proxy;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;
import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.backend.Backend;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The cache filter in front of an {@code nbd:} export, as a user caches a distant server: reads through it are kept
 * and served from the cache (so a change made at the upstream behind its back is not seen, as nbdkit warns), writes
 * reach the upstream with a flush, and the calls run on virtual threads (REMOTE kept, ASYNC dropped).
 */
@Timeout(120)
class CacheOverProxyTest {
    private static final int BLOCK = 64 * 1024;
    private final List<NbdServer> servers = new ArrayList<>();
    private final List<Export> exports = new ArrayList<>();

    @AfterEach
    void stop() {
        for (NbdServer s : servers.reversed()) s.stop(Duration.ofSeconds(5));
    }

    private InetSocketAddress serve(String spec) throws IOException {
        Export e = ExportSpec.parse(spec).openExport();
        exports.add(e);
        NbdServer server = new NbdServer(new Exports(List.of(e), null), ServerConfig.defaults());
        servers.add(server);
        return (InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0));
    }

    private static String uri(InetSocketAddress a, String export) {
        return "nbd://127.0.0.1:" + a.getPort() + "/" + export;
    }

    private static NbdClient client(InetSocketAddress a, String export) throws IOException {
        return NbdClient.connect(NbdUri.parse(uri(a, export)), ClientOptions.defaults().withRequestTimeout(Duration.ofSeconds(60)));
    }

    private static byte[] pattern(long seed, int n) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

    private static byte[] read(NbdClient c, long offset, int length) throws IOException {
        ByteBuffer buf = ByteBuffer.allocateDirect(length);
        c.blocking().read(offset, buf);
        byte[] out = new byte[length];
        buf.flip().get(out);
        return out;
    }

    @Test
    void aCacheInFrontOfAnNbdUpstreamKeepsWhatItReadsAndWritesBackOnFlush() throws Exception {
        InetSocketAddress up = serve("m=memory:64M");
        byte[] first = pattern(1, 4 * BLOCK);
        try (NbdClient direct = client(up, "m")) {
            direct.blocking().write(0, ByteBuffer.wrap(first), false);
        }
        InetSocketAddress proxy = serve("p=nbd:" + uri(up, "m") + ",filter=cache,cache-on-read=true,cache-max-size=4M");
        Backend chain = exports.getLast().backend();
        assertThat(chain.has(Backend.Trait.REMOTE)).as("misses wait on the upstream: virtual threads").isTrue();
        assertThat(chain.has(Backend.Trait.ASYNC)).as("the upstream's asynchronous calls would skip the cache").isFalse();

        try (NbdClient p = client(proxy, "p"); NbdClient direct = client(up, "m")) {
            assertThat(read(p, 100, 3 * BLOCK - 200)).isEqualTo(Arrays.copyOfRange(first, 100, 3 * BLOCK - 100));

            // Changed at the upstream behind the cache's back: the blocks it holds are served as they were.
            direct.blocking().write(0, ByteBuffer.wrap(pattern(2, 4 * BLOCK)), false);
            assertThat(read(p, 0, BLOCK)).as("a kept block, not fresh").isEqualTo(Arrays.copyOf(first, BLOCK));
            assertThat(read(p, 3 * BLOCK + 200, 100)).as("never read through the cache: fresh")
                .isEqualTo(Arrays.copyOfRange(pattern(2, 4 * BLOCK), 3 * BLOCK + 200, 3 * BLOCK + 300));

            byte[] mine = pattern(3, 10_000);
            p.blocking().write(8 * BLOCK + 5, ByteBuffer.wrap(mine), false);
            assertThat(read(direct, 8 * BLOCK + 5, mine.length)).as("writeback: not at the upstream before a flush").containsOnly(0);
            assertThat(read(p, 8 * BLOCK + 5, mine.length)).isEqualTo(mine);
            p.blocking().flush();
            assertThat(read(direct, 8 * BLOCK + 5, mine.length)).as("after the flush").isEqualTo(mine);

            byte[] large = pattern(4, 12 << 20);
            p.blocking().write(16L << 20, ByteBuffer.wrap(large), false);
            assertThat(read(p, 16L << 20, large.length)).as("more than the cache holds: evicted blocks written back").isEqualTo(large);
            p.blocking().flush();
            assertThat(read(direct, 16L << 20, large.length)).isEqualTo(large);
        }
    }
}
