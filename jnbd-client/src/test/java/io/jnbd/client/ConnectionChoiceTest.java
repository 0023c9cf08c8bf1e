package io.jnbd.client;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.Export;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Which of several connections a request goes to: small requests made together stay on one (they then leave in
 * one write and come back in one read), large ones are spread, so that several readers share their copying.
 */
@Timeout(60)
class ConnectionChoiceTest {

    @Test
    void smallRequestsShareOneConnectionAndLargeOnesSpread() throws Exception {
        CountDownLatch gate = new CountDownLatch(1);
        // Reads wait at the gate, so that every request stays in flight while the choices are looked at.
        FilterBackend gated = new FilterBackend(new MemoryBackend(64 << 20)) {
            @Override
            public void read(long offset, ByteBuffer dst) throws IOException {
                try {
                    gate.await();
                } catch (InterruptedException e) {
                    throw new InterruptedIOException("stopped at the gate");
                }
                super.read(offset, dst);
            }

            @Override
            public String describe() {
                return "gated memory";
            }
        };
        NbdServer server = new NbdServer(new Exports(List.of(new Export("m", "", gated)), null), ServerConfig.defaults());
        try {
            InetSocketAddress a = (InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0));
            try (NbdClient c = NbdClient.connect(URI.create("nbd://127.0.0.1:" + a.getPort() + "/m"),
                    ClientOptions.defaults().withConnections(4))) {
                assertThat(c.connectionCount()).as("the memory export offers CAN_MULTI_CONN").isEqualTo(4);
                List<CompletableFuture<Void>> all = new ArrayList<>();
                for (int i = 0; i < 8; i++) all.add(c.read(i * 4096L, ByteBuffer.allocateDirect(4096)));
                assertThat(sorted(c.loads())).as("8 small reads on one connection").containsExactly(0, 0, 0, 8);
                for (int i = 0; i < 3; i++) all.add(c.read((i + 1) * (1L << 20), ByteBuffer.allocateDirect(1 << 20)));
                assertThat(sorted(c.loads())).as("each large read on an idle connection").containsExactly(1, 1, 1, 8);
                gate.countDown();
                CompletableFuture.allOf(all.toArray(CompletableFuture[]::new)).get(30, TimeUnit.SECONDS);
                assertThat(sorted(c.loads())).containsExactly(0, 0, 0, 0);
            }
        } finally {
            gate.countDown();
            server.stop(Duration.ofSeconds(5));
        }
    }

    private static int[] sorted(int[] loads) {
        int[] s = loads.clone();
        Arrays.sort(s);
        return s;
    }
}
