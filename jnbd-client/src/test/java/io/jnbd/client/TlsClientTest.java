package io.jnbd.client;

import io.jnbd.tls.TestPki;
import io.jnbd.tls.TlsClientSettings;
import io.jnbd.tls.TlsServer;
import io.jnbd.tls.TlsServerSettings;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The client's TLS against jnbd-tls's server side in {@link TlsTestServer}: X.509 and PSK sessions carrying
 * data both ways, and every way a session can fail to start or break, each with its one-line reason.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS) // a hang is a failure, not a stuck build
class TlsClientTest {

    private static final int SIZE = 1 << 20;

    @TempDir
    Path dir;
    private TlsTestServer server;

    @AfterEach
    void stop() throws Exception {
        if (server != null) server.close();
    }

    private TlsTestServer start(TlsServerSettings settings, TlsTestServer.Mode mode) throws Exception {
        server = new TlsTestServer(TlsServer.load(settings), mode, SIZE);
        return server;
    }

    private String uri(String userAndHost, String query) {
        return "nbds://" + userAndHost + ":" + server.port() + "/" + TlsTestServer.EXPORT + "?" + query;
    }

    /** Writes, reads back and compares, across several requests in flight, over whatever session {@code c} has. */
    private static void exchangeData(NbdClient c, byte[] disk) throws Exception {
        ByteBuffer data = ByteBuffer.allocateDirect(256 * 1024);
        for (int i = 0; i < data.capacity(); i++) data.put(i, (byte) (i % 253));
        c.blocking().write(128 * 1024, data, false);
        ByteBuffer back = ByteBuffer.allocateDirect(512 * 1024);
        c.blocking().read(0, back);
        back.flip();
        for (int i = 0; i < 128 * 1024; i += 4093) assertThat(back.get(i)).isEqualTo(disk[i]);
        assertThat(back.slice(128 * 1024, 256 * 1024)).isEqualTo(data.flip());

        // A payload from a file: encrypted a piece at a time, more than one piece here.
        Path file = Files.createTempFile("jnbd-tls-payload", ".img");
        try (var ch = java.nio.channels.FileChannel.open(file, java.nio.file.StandardOpenOption.READ,
                java.nio.file.StandardOpenOption.WRITE)) {
            byte[] content = new byte[4096 + 300 * 1024];
            new java.util.Random(5).nextBytes(content);
            Files.write(file, content);
            c.write(512 * 1024, ch, 4096, 300 * 1024, false).get(30, TimeUnit.SECONDS);
            ByteBuffer got = ByteBuffer.allocateDirect(300 * 1024);
            c.blocking().read(512 * 1024, got);
            assertThat(got.flip()).isEqualTo(ByteBuffer.wrap(content, 4096, 300 * 1024));
        } finally {
            Files.delete(file);
        }
        c.blocking().flush();
    }

    @Test
    void x509SessionCarriesDataBothWays() throws Exception {
        Path pki = Files.createDirectory(dir.resolve("pki"));
        TestPki.create(pki);
        start(new TlsServerSettings(pki, null, false), TlsTestServer.Mode.TLS);
        byte[] before = server.disk().clone();
        try (NbdClient c = NbdClient.connect(uri("localhost", "tls-certificates=" + pki))) {
            assertThat(c.tls()).startsWith("TLS");
            assertThat(c.size()).isEqualTo(SIZE);
            exchangeData(c, before);
        }
        assertThat(NbdClient.list(java.net.URI.create(uri("127.0.0.1", "tls-certificates=" + pki))))
            .extracting(ExportListing::name).containsExactly(TlsTestServer.EXPORT);
    }

    @Test
    void clientCertificateForAServerThatVerifiesClients() throws Exception {
        Path pki = Files.createDirectory(dir.resolve("pki"));
        TestPki ca = TestPki.create(pki);
        start(new TlsServerSettings(pki, null, true), TlsTestServer.Mode.TLS);
        try (NbdClient c = NbdClient.connect(uri("localhost", "tls-certificates=" + pki))) {
            exchangeData(c, server.disk().clone());
        }
        Path caOnly = Files.createDirectory(dir.resolve("ca-only"));
        ca.writeCa(caOnly);
        assertThatThrownBy(() -> NbdClient.connect(uri("localhost", "tls-certificates=" + caOnly)))
            .isInstanceOf(NbdConnectionException.class)
            .hasMessageStartingWith("TLS handshake with localhost:" + server.port() + " failed: ");
    }

    @Test
    void pskSessionWithTheUsersIdentity() throws Exception {
        Path keys = dir.resolve("keys.psk");
        TestPki.writePsk(keys, "alice", "bob");
        start(new TlsServerSettings(null, keys, false), TlsTestServer.Mode.TLS);
        try (NbdClient c = NbdClient.connect(uri("bob@127.0.0.1", "tls-psk-file=" + keys))) {
            assertThat(c.tls()).startsWith("TLS");
            exchangeData(c, server.disk().clone());
        }
    }

    @Test
    void wrongPskKeyOrUnknownIdentityFailsTheHandshake() throws Exception {
        Path keys = dir.resolve("keys.psk");
        TestPki.writePsk(keys, "alice");
        start(new TlsServerSettings(null, keys, false), TlsTestServer.Mode.TLS);
        Path wrongKey = dir.resolve("wrong.psk");
        TestPki.writePsk(wrongKey, "alice");
        Path stranger = dir.resolve("stranger.psk");
        TestPki.writePsk(stranger, "mallory");
        for (String u : List.of(uri("alice@127.0.0.1", "tls-psk-file=" + wrongKey), uri("mallory@127.0.0.1", "tls-psk-file=" + stranger))) {
            assertThatThrownBy(() -> NbdClient.connect(u)).as(u).isInstanceOf(NbdConnectionException.class)
                .hasMessageStartingWith("TLS handshake with 127.0.0.1:" + server.port() + " failed: ")
                .satisfies(e -> assertThat(e.getMessage()).doesNotContain("\n"));
        }
    }

    @Test
    void serverCertificatesThatMustBeRefused() throws Exception {
        Path pki = Files.createDirectory(dir.resolve("pki"));
        TestPki.create(pki);
        start(new TlsServerSettings(pki, null, false), TlsTestServer.Mode.TLS);
        Path otherCa = Files.createDirectory(dir.resolve("other-ca"));
        TestPki.newCa("someone else's CA").writeCa(otherCa);
        String prefix = "TLS handshake with localhost:" + server.port() + " failed: ";
        // Signed by a CA the client does not trust.
        assertThatThrownBy(() -> NbdClient.connect(uri("localhost", "tls-certificates=" + otherCa)))
            .isInstanceOf(NbdConnectionException.class).hasMessageStartingWith(prefix);
        // Issued for other names than the one the client checks.
        assertThatThrownBy(() -> NbdClient.connect(uri("localhost", "tls-certificates=" + pki + "&tls-hostname=nbd.example.org")))
            .isInstanceOf(NbdConnectionException.class).hasMessageStartingWith(prefix);
        // With verification off the same server is accepted.
        try (NbdClient c = NbdClient.connect(uri("localhost", "tls-certificates=" + otherCa + "&tls-verify-peer=false"))) {
            assertThat(c.tls()).isNotNull();
        }
    }

    @Test
    void serverThatDeclinesStartTlsIsRefusedInOneLine() throws Exception {
        Path pki = Files.createDirectory(dir.resolve("pki"));
        TestPki.create(pki);
        start(new TlsServerSettings(pki, null, false), TlsTestServer.Mode.REFUSE);
        assertThatThrownBy(() -> NbdClient.connect(uri("localhost", "tls-certificates=" + pki)))
            .isInstanceOf(NbdException.class)
            .hasMessage("server at localhost:" + server.port() + " does not offer TLS (it answered STARTTLS with "
                + "ERR_POLICY: TLS is not configured)");
    }

    @Test
    void plainClientIsToldTheServerRequiresTls() throws Exception {
        Path pki = Files.createDirectory(dir.resolve("pki"));
        TestPki.create(pki);
        start(new TlsServerSettings(pki, null, false), TlsTestServer.Mode.TLS);
        assertThatThrownBy(() -> NbdClient.connect("nbd://127.0.0.1:" + server.port() + "/x"))
            .isInstanceOf(NbdException.class).hasMessageContaining("server requires TLS (use an nbds:// URI)");
        // The same plain URI with TLS from the options works.
        var tls = new TlsClientSettings(pki, null, null, true, null);
        try (NbdClient c = NbdClient.connect(NbdUri.parse("nbd://localhost:" + server.port() + "/x"),
            ClientOptions.defaults().withTls(tls))) {
            assertThat(c.tls()).isNotNull();
        }
    }

    @Test
    void connectTimeoutCoversTheTlsHandshake() throws Exception {
        Path pki = Files.createDirectory(dir.resolve("pki"));
        TestPki.create(pki);
        start(new TlsServerSettings(pki, null, false), TlsTestServer.Mode.SILENT_AFTER_ACK);
        var opts = ClientOptions.defaults().withConnectTimeout(Duration.ofMillis(500));
        assertThatThrownBy(() -> NbdClient.connect(NbdUri.parse(uri("localhost", "tls-certificates=" + pki)), opts))
            .isInstanceOf(NbdConnectionException.class)
            .hasMessage("handshake with localhost:" + server.port() + " timed out after 500 ms");
    }

    @Test
    void replyStalledInTheMiddleOfARecordTimesOutAndCloses() throws Exception {
        Path pki = Files.createDirectory(dir.resolve("pki"));
        TestPki.create(pki);
        start(new TlsServerSettings(pki, null, false), TlsTestServer.Mode.STALL_MID_RECORD);
        var opts = ClientOptions.defaults().withRequestTimeout(Duration.ofMillis(500));
        NbdClient c = NbdClient.connect(NbdUri.parse(uri("localhost", "tls-certificates=" + pki)), opts);
        try {
            assertThatThrownBy(() -> c.blocking().read(0, ByteBuffer.allocateDirect(4096)))
                .isInstanceOf(NbdTimeoutException.class).hasMessageContaining("got no reply within 500 ms");
            assertThat(server.stalled.await(10, TimeUnit.SECONDS)).isTrue();
        } finally {
            // Must return although the reader thread is stuck inside a record: closing the socket frees it.
            c.close();
        }
        assertThatThrownBy(() -> c.read(0, ByteBuffer.allocate(512))).isInstanceOf(IllegalStateException.class);
    }

    @Test
    void unusableTlsFilesAreConfigErrorsNamingTheFile() throws Exception {
        Path missing = dir.resolve("no-such-dir");
        assertThatThrownBy(() -> NbdClient.connect("nbds://localhost:1/x?tls-certificates=" + missing))
            .isInstanceOf(NbdConfigException.class).hasMessageContaining(missing.toString())
            .satisfies(e -> assertThat(e.getMessage()).doesNotContain("\n"));
        Path noPsk = dir.resolve("none.psk");
        assertThatThrownBy(() -> NbdClient.connect("nbds://localhost:1/x?tls-psk-file=" + noPsk))
            .isInstanceOf(NbdConfigException.class).hasMessageContaining(noPsk.toString());
        Path keys = dir.resolve("keys.psk");
        TestPki.writePsk(keys, Map.of("alice", new byte[32]));
        assertThatThrownBy(() -> NbdClient.connect("nbds://bob@localhost:1/x?tls-psk-file=" + keys))
            .isInstanceOf(NbdConfigException.class).hasMessageContaining("bob");
        assertThatThrownBy(() -> NbdClient.list(java.net.URI.create("nbds://localhost:1/?tls-certificates=" + missing)))
            .isInstanceOf(NbdConfigException.class);
    }
}
