package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.io.NativeSocket;
import io.jnbd.server.io.SocketOptions;
import io.jnbd.tls.TestPki;
import io.jnbd.tls.TlsServer;
import io.jnbd.tls.TlsServerSettings;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * How the server sizes a connection's send queue once its transmission phase starts: a plain client on this
 * host gets the fixed buffer that suits sendfile, a TLS client the kernel's autotuning and a cap on unsent
 * bytes (see ServerConfig.TLS_UNSENT_LIMIT). Read back from the server's own sockets with getsockopt.
 */
@Timeout(60)
class SendQueueTest {
    @TempDir
    Path dir;
    private NbdServer server;
    private InetSocketAddress address;

    @AfterEach
    void stop() {
        if (server != null) server.stop(Duration.ofSeconds(5));
    }

    private void start(ServerConfig config) throws Exception {
        assumeTrue(NativeSocket.AVAILABLE, "native sockets");
        TestPki.create(dir);
        server = new NbdServer(new Exports(List.of(ExportSpec.parse("mem=memory:8M").openExport()), null), config,
            new ServerTls(ServerTls.Mode.ON, TlsServer.load(new TlsServerSettings(dir, null, false))));
        address = (InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0));
    }

    /** A client in its transmission phase, after one round trip: the server sized its queue before answering. */
    private RawClient transmitting(boolean tls) throws IOException {
        RawClient c = RawClient.connect(address);
        c.greeting();
        c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        if (tls) RealTls.startTls(c, RealTls.x509(dir));
        c.negotiateAfterGreeting("mem", true);
        assertThat(c.read(0, 4096)).hasSize(4096);
        return c;
    }

    private int serverSide(RawClient c) throws IOException {
        int clientPort = ((InetSocketAddress) c.channel.getLocalAddress()).getPort();
        return SocketOptions.fdOf(address.getPort(), clientPort).orElseThrow();
    }

    @Test
    void aPlainClientOnThisHostGetsTheFixedBufferAndATlsClientTheUnsentCap() throws Exception {
        start(ServerConfig.defaults());
        try (RawClient plain = transmitting(false); RawClient tls = transmitting(true)) {
            int p = serverSide(plain), t = serverSide(tls);
            assertThat(SocketOptions.sendBuffer(p)).as("SO_SNDBUF, which the kernel doubles").isEqualTo(2 * ServerConfig.LOCAL_SEND_BUFFER);
            assertThat(SocketOptions.unsentLimit(p)).as("no cap on a plain connection").isZero();
            assertThat(SocketOptions.unsentLimit(t)).isEqualTo(ServerConfig.TLS_UNSENT_LIMIT);
            assertThat(SocketOptions.sendBuffer(t)).as("left to autotuning").isNotEqualTo(2 * ServerConfig.LOCAL_SEND_BUFFER);
            plain.disconnect();
            tls.disconnect();
        }
    }

    @Test
    void aSendBufferTheOperatorSetHoldsUnderTlsToo() throws Exception {
        start(ServerConfig.defaults().withSendBuffer(96 << 10));
        try (RawClient plain = transmitting(false); RawClient tls = transmitting(true)) {
            assertThat(SocketOptions.sendBuffer(serverSide(plain))).isEqualTo(2 * (96 << 10));
            assertThat(SocketOptions.sendBuffer(serverSide(tls))).isEqualTo(2 * (96 << 10));
            assertThat(SocketOptions.unsentLimit(serverSide(tls))).isEqualTo(ServerConfig.TLS_UNSENT_LIMIT);
            plain.disconnect();
            tls.disconnect();
        }
    }
}
