package io.jnbd.tls;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

/** Certificates refused, at both ends and both versions, each with one line that says which and why. */
@Timeout(60)
class X509FailureTest {
    @TempDir
    static Path root;
    static Path good;       // CA, server "localhost", client "client"
    static Path otherCa;    // an unrelated CA with its own client
    static Path expired;    // server and client certificates of the good CA, expired
    static Path notYet;     // ... not yet valid
    static Path revoked;    // the good CA's files, with a CRL revoking a client written for it
    static TestPki ca;

    @BeforeAll
    static void pki() throws Exception {
        good = Files.createDirectory(root.resolve("good"));
        ca = TestPki.create(good);
        otherCa = Files.createDirectory(root.resolve("other"));
        TestPki.newCa("some other CA").writeAll(otherCa, "localhost", "stranger");
        expired = Files.createDirectory(root.resolve("expired"));
        ca.writeCa(expired);
        ca.writeServer(expired, "localhost", TestPki.Validity.EXPIRED, TestPki.KeyFormat.PKCS8);
        ca.writeClient(expired, "client", TestPki.Validity.EXPIRED, TestPki.KeyFormat.PKCS8);
        notYet = Files.createDirectory(root.resolve("not-yet"));
        ca.writeCa(notYet);
        ca.writeServer(notYet, "localhost", TestPki.Validity.NOT_YET_VALID, TestPki.KeyFormat.PKCS8);
        ca.writeClient(notYet, "client", TestPki.Validity.NOT_YET_VALID, TestPki.KeyFormat.PKCS8);
        revoked = Files.createDirectory(root.resolve("revoked"));
        ca.writeAll(revoked, "localhost", "revoked-client");
        ca.writeCrlRevokingLastClient(revoked);
    }

    enum Version { TLS13, TLS12 }

    static Versions v(Version v) {
        return v == Version.TLS13 ? Versions.TLS13 : Versions.TLS12;
    }

    static TlsServer server(Path dir, boolean verifyPeer, Version v) throws TlsConfigException {
        return ServerContext.load(new TlsServerSettings(dir, null, verifyPeer), v(v));
    }

    static TlsClient client(Path dir, String host, Version v) throws TlsConfigException {
        return ClientContext.load(new TlsClientSettings(dir, null, null, true, host), v(v));
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void serverFromAnotherCa(Version v) throws Exception {
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server(otherCa, false, v));
            assertThatThrownBy(() -> client(good, "localhost", v).connect(net.clientRaw()))
                .isInstanceOf(TlsException.class)
                .hasMessage("TLS handshake failed: server certificate 'CN=localhost' (issuer 'CN=some other CA') is not signed by a CA in ca-cert.pem");
            assertThat(catchThrowable(() -> Loopback.await(s))).isInstanceOf(TlsException.class).hasMessageContaining("certificate_unknown");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void expiredServerCertificate(Version v) throws Exception {
        try (Loopback net = Loopback.open()) {
            net.acceptAsync(UncheckedPeers.server(expired));
            assertThatThrownBy(() -> client(good, "localhost", v).connect(net.clientRaw()))
                .isInstanceOf(TlsException.class).hasMessageMatching("TLS handshake failed: server certificate 'CN=localhost' expired on 20.*Z");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void serverCertificateNotYetValid(Version v) throws Exception {
        try (Loopback net = Loopback.open()) {
            net.acceptAsync(UncheckedPeers.server(notYet));
            assertThatThrownBy(() -> client(good, "localhost", v).connect(net.clientRaw()))
                .isInstanceOf(TlsException.class).hasMessageMatching("TLS handshake failed: server certificate 'CN=localhost' is not valid before 20.*Z");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void hostNameMismatch(Version v) throws Exception {
        try (Loopback net = Loopback.open()) {
            net.acceptAsync(server(good, false, v));
            assertThatThrownBy(() -> client(good, "nbd.example.com", v).connect(net.clientRaw()))
                .isInstanceOf(TlsException.class)
                .hasMessage("TLS handshake failed: server certificate names localhost, 127.0.0.1, not 'nbd.example.com'");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void theServersIpAddressSubjectAltNameMatches(Version v) throws Exception {
        try (Loopback net = Loopback.open(); var s = net.handshake(server(good, false, v), client(good, "127.0.0.1", v))) {
            assertThat(s.client().peerIdentities()).containsExactly("localhost", "127.0.0.1");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void verifyPeerAcceptsTheCasClientAndNamesIt(Version v) throws Exception {
        try (Loopback net = Loopback.open(); var s = net.handshake(server(good, true, v), client(good, "localhost", v))) {
            assertThat(s.server().peerIdentities()).containsExactly("client");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void verifyPeerRefusesAClientWithoutCertificate(Version v) throws Exception {
        Path noClientCert = Files.createDirectories(root.resolve("ca-only-" + v));
        ca.writeCa(noClientCert);
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server(good, true, v));
            // In TLS 1.3 the client is done before the server has seen its (empty) certificate: it hears at its first read.
            Throwable c = catchThrowable(() -> client(noClientCert, "localhost", v).connect(net.clientRaw()).read(ByteBuffer.allocate(1)));
            assertThat(catchThrowable(() -> Loopback.await(s))).isInstanceOf(TlsException.class)
                .hasMessage("TLS handshake failed: the client sent no certificate (or none from a CA in ca-cert.pem), and verify-peer requires one");
            assertThat(c).isInstanceOf(TlsException.class).hasMessageContaining("the peer sent alert");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void verifyPeerRefusesAClientFromAnotherCa(Version v) throws Exception {
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server(good, true, v));
            catchThrowable(() -> UncheckedPeers.client(otherCa).connect(net.clientRaw()).read(ByteBuffer.allocate(1)));
            assertThat(catchThrowable(() -> Loopback.await(s))).isInstanceOf(TlsException.class)
                .hasMessage("TLS handshake failed: client certificate 'CN=stranger' (issuer 'CN=some other CA') is not signed by a CA in ca-cert.pem");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void ourClientHoldsBackACertificateTheServersCasDidNotSign(Version v) throws Exception {
        Path mixed = Files.createDirectories(root.resolve("stranger-" + v));
        Files.copy(good.resolve(TestPki.CA_CERT), mixed.resolve(TestPki.CA_CERT));
        Files.copy(otherCa.resolve(TestPki.CLIENT_CERT), mixed.resolve(TestPki.CLIENT_CERT));
        Files.copy(otherCa.resolve(TestPki.CLIENT_KEY), mixed.resolve(TestPki.CLIENT_KEY));
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server(good, true, v));
            catchThrowable(() -> client(mixed, "localhost", v).connect(net.clientRaw()).read(ByteBuffer.allocate(1)));
            assertThat(catchThrowable(() -> Loopback.await(s))).isInstanceOf(TlsException.class)
                .hasMessageContaining("the client sent no certificate (or none from a CA in ca-cert.pem)");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void verifyPeerRefusesAnExpiredClient(Version v) throws Exception {
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server(good, true, v));
            catchThrowable(() -> UncheckedPeers.client(expired).connect(net.clientRaw()).read(ByteBuffer.allocate(1)));
            assertThat(catchThrowable(() -> Loopback.await(s))).isInstanceOf(TlsException.class)
                .hasMessageMatching("TLS handshake failed: client certificate 'CN=client' expired on 20.*Z");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void verifyPeerRefusesAClientNotYetValid(Version v) throws Exception {
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server(good, true, v));
            catchThrowable(() -> UncheckedPeers.client(notYet).connect(net.clientRaw()).read(ByteBuffer.allocate(1)));
            assertThat(catchThrowable(() -> Loopback.await(s))).isInstanceOf(TlsException.class)
                .hasMessageMatching("TLS handshake failed: client certificate 'CN=client' is not valid before 20.*Z");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void theCrlRevokesAClient(Version v) throws Exception {
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server(revoked, true, v));
            catchThrowable(() -> client(revoked, "localhost", v).connect(net.clientRaw()).read(ByteBuffer.allocate(1)));
            assertThat(catchThrowable(() -> Loopback.await(s))).isInstanceOf(TlsException.class)
                .hasMessage("TLS handshake failed: client certificate 'CN=revoked-client' is revoked (ca-crl.pem)");
        }
        // The CRL names only that client: another of the same CA still gets in.
        try (Loopback net = Loopback.open(); var s = net.handshake(server(revoked, true, v), client(good, "localhost", v))) {
            assertThat(s.server().peerIdentities()).containsExactly("client");
        }
    }

    @Test
    void withoutVerifyPeerTheClientTakesAnyServer() throws Exception {
        TlsClient trusting = TlsClient.load(new TlsClientSettings(good, null, null, false, "nbd.example.com"));
        try (Loopback net = Loopback.open(); var s = net.handshake(TlsServer.load(new TlsServerSettings(otherCa, null, false)), trusting)) {
            assertThat(s.client().peerIdentities()).containsExactly("localhost", "127.0.0.1");
        }
    }
}
