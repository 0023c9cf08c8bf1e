package io.jnbd.pool;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdErrorException;
import io.jnbd.client.NbdUri;
import io.jnbd.pool.memserver.MemServer;
import io.jnbd.protocol.Nbd;
import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A pool served as an NBD export, as every NBD client meets it: opened from its spec, reads and writes of every
 * size (the asynchronous path, large reads split into chunks), block status that tells written extents from
 * holes, and the pool's failures as NBD errors (EIO for a lost extent, ENOSPC for a full pool).
 */
@Timeout(120)
class PoolExportTest {

    private static NbdClient client(InetSocketAddress a) throws Exception {
        return NbdClient.connect(new NbdUri(URI.create("nbd://127.0.0.1:" + a.getPort() + "/swap"), a, "swap"),
            ClientOptions.defaults().withRequestTimeout(Duration.ofSeconds(30)));
    }

    private static byte[] pattern(long seed, int n) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return b;
    }

    @Test
    void aPoolExportServesEveryRequestAndReportsItsFailuresAsNbdErrors() throws Exception {
        try (TestCluster c = new TestCluster(2, MemServer.Config.ofMemory(8L << 20))) {
            ExportSpec spec = ExportSpec.parse("swap", "pool:" + String.join(",", c.addresses())
                + ",size=64M,replicas=2,extent=256K,server-timeout=1");
            assertThat(spec.tuning().streams()).isPositive();
            Export export = spec.openExport();
            NbdServer server = new NbdServer(new Exports(List.of(export), null), ServerConfig.defaults());
            try {
                InetSocketAddress a = (InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0));
                try (NbdClient n = client(a)) {
                    assertThat(n.size()).isEqualTo(64L << 20);
                    // Sizes from a sector to several extents, at odd offsets; 4 MiB reads leave as split chunks.
                    int[] sizes = {512, 4096, 65536 + 512, 1 << 20, 4 << 20};
                    long at = 3 * 512;
                    for (int i = 0; i < sizes.length; i++) {
                        byte[] data = pattern(i, sizes[i]);
                        n.blocking().write(at, ByteBuffer.wrap(data), false);
                        ByteBuffer back = ByteBuffer.allocateDirect(sizes[i]);
                        n.blocking().read(at, back);
                        byte[] got = new byte[sizes[i]];
                        back.flip().get(got);
                        assertThat(got).as("%d bytes at %d", sizes[i], at).isEqualTo(data);
                        at += sizes[i] + 7 * 512;
                    }
                    var map = n.blocking().extents(0, 64L << 20);
                    assertThat(map.getFirst().flags() & Nbd.STATE_HOLE).as("written extents are data").isZero();
                    assertThat(map.getLast().flags() & Nbd.STATE_HOLE).as("the rest is a hole").isNotZero();

                    // Two servers of 8 MiB, two copies: 32 extents fit; what is written already holds some of them.
                    assertThatThrownBy(() -> n.blocking().write(16L << 20, ByteBuffer.wrap(pattern(9, 16 << 20)), false))
                        .isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.ENOSPC));

                    c.kill(0);
                    c.kill(1);
                    assertThatThrownBy(() -> n.blocking().read(3 * 512, ByteBuffer.allocate(4096)))
                        .isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.EIO));
                    ByteBuffer hole = ByteBuffer.allocate(4096);
                    n.blocking().read(60L << 20, hole);
                    assertThat(hole.array()).as("a never-written extent still reads as zeroes").containsOnly(0);
                }
            } finally {
                server.stop(Duration.ofSeconds(5));
            }
        }
    }
}
