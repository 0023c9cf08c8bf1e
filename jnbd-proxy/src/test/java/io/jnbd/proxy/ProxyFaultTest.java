package io.jnbd.proxy;

import static io.jnbd.proxy.ProxyExportTest.pattern;
import static io.jnbd.proxy.ProxyExportTest.read;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdErrorException;
import io.jnbd.protocol.Nbd;
import io.jnbd.server.FaultyProxy;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * An upstream that goes away: the requests it held fail with EIO (at once when its connections break, after
 * the export's timeout when it hangs), requests while it is away fail with EIO rather than wait, the first
 * request after it is back is served with the data it kept, and another export of the same server is served
 * throughout.
 */
@Timeout(120)
class ProxyFaultTest {
    private final ProxyExportTest servers = new ProxyExportTest();
    private FaultyProxy relay;

    @AfterEach
    void stop() {
        servers.stop(); // first: the proxy's flush on shutdown still reaches the upstream
        if (relay != null) relay.close();
    }

    private static void assertEio(ThrowingRead r, String what) {
        assertThatThrownBy(r::run).as(what)
            .isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.EIO));
    }

    interface ThrowingRead {
        void run() throws Exception;
    }

    private static void assertOtherExportServed(NbdClient local, int seed) throws Exception {
        local.blocking().write(0, ByteBuffer.wrap(pattern(seed, 65536)), false);
        assertThat(read(local, 0, 65536)).as("the other export").isEqualTo(pattern(seed, 65536));
    }

    @Test
    void aCutUpstreamFailsItsRequestsWithEioAndIsServedAgainOnceBack() throws Exception {
        InetSocketAddress up = servers.serve("m=memory:16M");
        relay = new FaultyProxy(up);
        InetSocketAddress proxy = servers.serve("p=nbd:nbd://127.0.0.1:" + relay.port() + "/m,connections=2", "local=memory:16M");
        try (NbdClient p = ProxyExportTest.client(proxy, "p"); NbdClient local = ProxyExportTest.client(proxy, "local");
             NbdClient direct = ProxyExportTest.client(up, "m")) {
            p.blocking().write(0, ByteBuffer.wrap(pattern(1, 1 << 20)), false);

            // Requests held by the upstream when it goes; those that had not reached it meet it refusing.
            relay.hang(true);
            List<CompletableFuture<Void>> inFlight = new ArrayList<>();
            for (int i = 0; i < 8; i++) inFlight.add(p.read(i * 65536L, ByteBuffer.allocateDirect(65536)));
            inFlight.add(p.write(1 << 20, ByteBuffer.wrap(pattern(2, 65536)), false));
            relay.refuse(true);
            relay.cut();
            for (CompletableFuture<Void> f : inFlight) {
                assertThatThrownBy(f::join).isInstanceOf(CompletionException.class)
                    .cause().isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.EIO));
            }
            assertOtherExportServed(local, 3);

            assertEio(() -> read(p, 0, 4096), "a read while the upstream is away");
            assertEio(() -> p.blocking().flush(), "a flush while the upstream is away");
            assertOtherExportServed(local, 4);

            relay.hang(false);
            relay.refuse(false);
            assertThat(read(p, 0, 1 << 20)).as("the first read after the upstream is back").isEqualTo(pattern(1, 1 << 20));
            p.blocking().write(2 << 20, ByteBuffer.wrap(pattern(5, 65536)), true);
            assertThat(read(direct, 2 << 20, 65536)).isEqualTo(pattern(5, 65536));
        }
    }

    @Test
    void anUpstreamRestartedBetweenRequestsServesTheNextRequest() throws Exception {
        InetSocketAddress up = servers.serve("m=memory:16M");
        relay = new FaultyProxy(up);
        InetSocketAddress proxy = servers.serve("p=nbd:nbd://127.0.0.1:" + relay.port() + "/m");
        try (NbdClient p = ProxyExportTest.client(proxy, "p")) {
            p.blocking().write(0, ByteBuffer.wrap(pattern(1, 65536)), false);
            relay.cut(); // the upstream's connections close while no request is out, and it is back at once
            NbdBackend backend = (NbdBackend) servers.export("p").backend();
            while (backend.upstreamConnected()) Thread.sleep(10); // until the proxy's client has seen the close
            assertThat(read(p, 0, 65536)).as("the next request, not failed for a loss it did not see").isEqualTo(pattern(1, 65536));
        }
    }

    @Test
    void aHungUpstreamFailsItsRequestsWithEioAfterTheTimeout() throws Exception {
        InetSocketAddress up = servers.serve("m=memory:16M");
        relay = new FaultyProxy(up);
        InetSocketAddress proxy = servers.serve("p=nbd:nbd://127.0.0.1:" + relay.port() + "/m,timeout=3s", "local=memory:16M");
        try (NbdClient p = ProxyExportTest.client(proxy, "p"); NbdClient local = ProxyExportTest.client(proxy, "local")) {
            p.blocking().write(0, ByteBuffer.wrap(pattern(1, 65536)), false);

            relay.hang(true);
            CompletableFuture<Void> write = p.write(65536, ByteBuffer.wrap(pattern(2, 4096)), false);
            assertEio(() -> read(p, 0, 65536), "a read the upstream never answers");
            assertThatThrownBy(write::join).as("a write the upstream never answers").isInstanceOf(CompletionException.class)
                .cause().isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.EIO));
            assertOtherExportServed(local, 3);

            relay.hang(false);
            assertThat(read(p, 0, 65536)).as("the first read after the upstream answers again").isEqualTo(pattern(1, 65536));
        }
    }
}
