package io.jnbd.client;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.Export;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.backend.MemoryBackend;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A client connected and used from virtual threads leaves its sockets in blocking mode. The JDK switches a
 * socket to non-blocking mode for good once a virtual thread blocks on it, and the connection's reader thread
 * then pays a failed read and a poll before each of its reads: three system calls where one does.
 */
@Timeout(60)
class VirtualThreadCallerTest {

    @Test
    void socketsStayBlockingWhenVirtualThreadsConnectAndSubmit() throws Exception {
        NbdServer server = new NbdServer(new Exports(List.of(new Export("m", "", new MemoryBackend(16 << 20))), null),
            ServerConfig.defaults());
        try {
            InetSocketAddress a = (InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0));
            CompletableFuture<NbdClient> connected = new CompletableFuture<>();
            Thread.ofVirtual().start(() -> {
                try {
                    connected.complete(NbdClient.connect(URI.create("nbd://127.0.0.1:" + a.getPort() + "/m"),
                        ClientOptions.defaults().withConnections(2)));
                } catch (Throwable t) {
                    connected.completeExceptionally(t);
                }
            });
            try (NbdClient c = connected.get()) {
                AtomicReference<Throwable> failed = new AtomicReference<>();
                Thread t = Thread.ofVirtual().start(() -> {
                    try {
                        for (int i = 0; i < 200; i++) {
                            c.blocking().write(i * 4096L, ByteBuffer.allocateDirect(4096), false);
                            c.blocking().read(i * 4096L, ByteBuffer.allocateDirect(4096));
                        }
                    } catch (Throwable e) {
                        failed.set(e);
                    }
                });
                t.join();
                assertThat(failed.get()).as("I/O from the virtual thread").isNull();
                assertThat(c.channels()).isNotEmpty();
                for (SocketChannel ch : c.channels()) {
                    assertThat(Tests.fileStatusFlags(ch) & Tests.O_NONBLOCK).as("O_NONBLOCK on the client's socket").isZero();
                }
            }
        } finally {
            server.stop(Duration.ofSeconds(5));
        }
    }
}
