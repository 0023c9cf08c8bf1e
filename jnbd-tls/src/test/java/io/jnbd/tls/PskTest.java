package io.jnbd.tls;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

/** PSK: which identity a client uses, and what each end says when the identity or the key is wrong. */
@Timeout(60)
class PskTest {
    @TempDir
    static Path dir;
    static Path serverKeys;   // alice, bob
    static Path wrongKey;     // alice with another key
    static Path stranger;     // mallory only

    @BeforeAll
    static void keys() {
        serverKeys = dir.resolve("server.psk");
        Map<String, byte[]> keys = TestPki.writePsk(serverKeys, "alice", "bob");
        wrongKey = dir.resolve("wrong.psk");
        TestPki.writePsk(wrongKey, "alice");
        assertThat(keys.get("alice")).isNotEqualTo(readKey(wrongKey));
        stranger = dir.resolve("stranger.psk");
        TestPki.writePsk(stranger, "mallory");
    }

    private static byte[] readKey(Path file) {
        try {
            return PskFile.load(file).first().getValue();
        } catch (TlsConfigException e) {
            throw new IllegalStateException(e);
        }
    }

    enum Version { TLS13, TLS12 }

    static Versions v(Version v) {
        return v == Version.TLS13 ? Versions.TLS13 : Versions.TLS12;
    }

    static TlsServer server(Version v) throws TlsConfigException {
        return ServerContext.load(new TlsServerSettings(null, serverKeys, false), v(v));
    }

    static TlsClient client(Path keys, String identity, Version v) throws TlsConfigException {
        return ClientContext.load(new TlsClientSettings(null, keys, identity, true, "localhost"), v(v));
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void theClientUsesTheIdentityItIsGivenElseTheFirstLine(Version v) throws Exception {
        try (Loopback net = Loopback.open(); var s = net.handshake(server(v), client(serverKeys, "bob", v))) {
            assertThat(s.server().peerIdentities()).containsExactly("bob");
        }
        try (Loopback net = Loopback.open(); var s = net.handshake(server(v), client(serverKeys, null, v))) {
            assertThat(s.server().peerIdentities()).containsExactly("alice");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void wrongKey(Version v) throws Exception {
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server(v));
            Throwable c = catchThrowable(() -> client(wrongKey, null, v).connect(net.clientRaw()));
            assertThat(catchThrowable(() -> Loopback.await(s))).isInstanceOf(TlsException.class)
                .hasMessage("PSK handshake failed: bad key for 'alice'");
            assertThat(c).isInstanceOf(TlsException.class).hasMessageStartingWith("PSK handshake failed: the server refused the key of 'alice'");
        }
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void unknownIdentity(Version v) throws Exception {
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server(v));
            Throwable c = catchThrowable(() -> client(stranger, null, v).connect(net.clientRaw()));
            assertThat(catchThrowable(() -> Loopback.await(s))).isInstanceOf(TlsException.class)
                .hasMessage("unknown PSK identity 'mallory'");
            // TLS 1.3: the server answers with a ServerHello that picks no PSK; TLS 1.2: with alert unknown_psk_identity.
            assertThat(c).isInstanceOf(TlsException.class).hasMessage(v == Version.TLS13
                ? "the server did not accept PSK identity 'mallory'" : "the server does not know PSK identity 'mallory'");
        }
    }

    @Test
    void anIdentityMissingFromTheFileIsAConfigurationError() {
        assertThatThrownBy(() -> TlsClient.load(new TlsClientSettings(null, serverKeys, "carol", true, "localhost")))
            .isInstanceOf(TlsConfigException.class).hasMessage(serverKeys + ": no key for PSK identity 'carol'");
    }

    @Test
    void anX509ClientAtAPskOnlyServer() throws Exception {
        Path pki = Files.createDirectories(dir.resolve("pki"));
        TestPki.create(pki);
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server(Version.TLS13));
            catchThrowable(() -> TlsClient.load(new TlsClientSettings(pki, null, null, true, "localhost")).connect(net.clientRaw()));
            assertThat(catchThrowable(() -> Loopback.await(s))).isInstanceOf(TlsException.class)
                .hasMessage("the client offered no PSK identity (an X.509 client?)");
        }
    }

    /** One server with certificates and keys: each client gets the engine it asks for. */
    @ParameterizedTest
    @EnumSource(Version.class)
    void aServerWithBothTakesX509AndPskClients(Version v) throws Exception {
        Path both = Files.createDirectories(dir.resolve("both-" + v));
        TestPki.create(both);
        TlsServer server = ServerContext.load(new TlsServerSettings(both, serverKeys, false), v(v));
        assertThat(server.describe()).isEqualTo("X.509 (CN=localhost); PSK (2 identities)");
        try (Loopback net = Loopback.open(); var s = net.handshake(server, client(serverKeys, "bob", v))) {
            assertThat(s.server().peerIdentities()).containsExactly("bob");
        }
        TlsClient x509 = ClientContext.load(new TlsClientSettings(both, null, null, true, "localhost"), v(v));
        try (Loopback net = Loopback.open(); var s = net.handshake(server, x509)) {
            assertThat(s.client().peerIdentities()).containsExactly("localhost", "127.0.0.1");
        }
        try (Loopback net = Loopback.open()) {
            CompletableFuture<SecureChannel> s = net.acceptAsync(server);
            catchThrowable(() -> client(stranger, null, v).connect(net.clientRaw()));
            assertThat(catchThrowable(() -> Loopback.await(s))).hasMessage("unknown PSK identity 'mallory'");
        }
    }
}
