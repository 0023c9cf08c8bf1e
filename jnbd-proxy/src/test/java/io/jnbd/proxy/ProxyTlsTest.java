package io.jnbd.proxy;

import static io.jnbd.proxy.ProxyExportTest.pattern;
import static io.jnbd.proxy.ProxyExportTest.read;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.client.NbdClient;
import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.ServerTls;
import io.jnbd.tls.TestPki;
import io.jnbd.tls.TlsServer;
import io.jnbd.tls.TlsServerSettings;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * An {@code nbds://} upstream that requires TLS: the proxy reaches it with X.509 (libnbd's tls-certificates
 * directory) and with a pre-shared key whose identity is the URI's user, and serves its clients in plain text.
 */
@Timeout(120)
class ProxyTlsTest {
    @TempDir
    Path dir;
    private NbdServer upstream;
    private final ProxyExportTest proxies = new ProxyExportTest();

    @AfterEach
    void stop() {
        proxies.stop();
        if (upstream != null) upstream.stop(Duration.ofSeconds(5));
    }

    private int startUpstream(TlsServerSettings settings) throws Exception {
        Export m = ExportSpec.parse("m=memory:16M").openExport();
        upstream = new NbdServer(new Exports(List.of(m), null), ServerConfig.defaults(),
            new ServerTls(ServerTls.Mode.REQUIRE, TlsServer.load(settings)));
        return ((InetSocketAddress) upstream.listen(new InetSocketAddress("127.0.0.1", 0))).getPort();
    }

    private void roundTrip(String spec) throws Exception {
        InetSocketAddress proxy = proxies.serve(spec);
        try (NbdClient p = ProxyExportTest.client(proxy, "p")) {
            assertThat(p.tls()).as("the proxy's own clients are plain").isNull();
            p.blocking().write(4096, ByteBuffer.wrap(pattern(7, 1 << 20)), true);
            assertThat(read(p, 4096, 1 << 20)).isEqualTo(pattern(7, 1 << 20));
        }
    }

    @Test
    void x509() throws Exception {
        TestPki.create(dir);
        int port = startUpstream(new TlsServerSettings(dir, null, true));
        roundTrip("p=nbd:nbds://localhost:" + port + "/m?tls-certificates=" + dir);
    }

    @Test
    void pskWithTheUrisUserAsIdentity() throws Exception {
        Path keys = dir.resolve("keys.psk");
        TestPki.writePsk(keys, "alice", "bob");
        int port = startUpstream(new TlsServerSettings(null, keys, false));
        roundTrip("p=nbd:nbds://bob@127.0.0.1:" + port + "/m?tls-psk-file=" + keys);
    }

    @Test
    void anUpstreamThatRequiresTlsIsNotOpenedWithoutIt() throws Exception {
        TestPki.create(dir);
        int port = startUpstream(new TlsServerSettings(dir, null, false));
        assertThatThrownBy(() -> ExportSpec.parse("p=nbd:nbd://127.0.0.1:" + port + "/m").openExport())
            .isInstanceOf(IOException.class);
    }
}
