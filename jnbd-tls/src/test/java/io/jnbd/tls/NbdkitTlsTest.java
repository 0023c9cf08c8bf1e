package io.jnbd.tls;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Our TLS client against nbdkit's (GnuTLS): the NBD handshake by hand up to NBD_OPT_STARTTLS, our client's TLS
 * handshake, then NBD_OPT_GO and a write and read of the export over TLS. X.509, X.509 with a client certificate
 * (--tls-verify-peer) and PSK, each at TLS 1.3 and at TLS 1.2 (forced from our side).
 */
@Timeout(120)
class NbdkitTlsTest {
    private static final long SIZE = 1 << 20;

    @TempDir
    static Path dir;

    @BeforeAll
    static void needNbdkit() {
        assumeTrue(ExternalPeer.onPath("nbdkit"), "nbdkit is not installed; skipping the GnuTLS interop tests");
        Setup.prepare(dir);
    }

    enum Version { TLS13, TLS12 }

    static Versions v(Version v) {
        return v == Version.TLS13 ? Versions.TLS13 : Versions.TLS12;
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void psk(Version v) throws Exception {
        String d = session(ClientContext.load(new TlsClientSettings(null, dir.resolve(Setup.PSK_FILE), "bob", true, "localhost"), v(v)),
            "--tls=require", "--tls-psk=" + dir.resolve(Setup.PSK_FILE));
        assertThat(d).startsWith(v == Version.TLS13 ? "TLSv1.3 TLS_AES_128_GCM_SHA256" : "TLSv1.2 TLS_");
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void x509(Version v) throws Exception {
        String d = session(ClientContext.load(new TlsClientSettings(dir, null, null, true, "localhost"), v(v)),
            "--tls=require", "--tls-certificates=" + dir);
        assertThat(d).startsWith(v == Version.TLS13 ? "TLSv1.3 " : "TLSv1.2 ");
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void x509WithAClientCertificate(Version v) throws Exception {
        session(ClientContext.load(new TlsClientSettings(dir, null, null, true, "127.0.0.1"), v(v)),
            "--tls=require", "--tls-certificates=" + dir, "--tls-verify-peer");
    }

    @Test
    void verifyPeerWithoutAClientCertificate() throws Exception {
        Path caOnly = Files.createDirectories(dir.resolve("ca-only"));
        Files.copy(dir.resolve(TestPki.CA_CERT), caOnly.resolve(TestPki.CA_CERT));
        TlsClient client = TlsClient.load(new TlsClientSettings(caOnly, null, null, true, "localhost"));
        Throwable e = catchThrowable(() -> session(client, "--tls=require", "--tls-certificates=" + dir, "--tls-verify-peer"));
        // GnuTLS ends the session once it sees no certificate; in TLS 1.3 our client learns it at its first read,
        // as an alert or, when nbdkit closes with our bytes unread, as a reset that loses the alert.
        assertThat(e).isInstanceOf(java.io.IOException.class);
    }

    /** nbdkit hangs up without an alert, so all our client can say is where, and what that likely means. */
    @ParameterizedTest
    @EnumSource(Version.class)
    void pskWithTheWrongKey(Version v) throws Exception {
        Path wrong = dir.resolve("wrong.psk");
        TestPki.writePsk(wrong, "alice");
        TlsClient client = ClientContext.load(new TlsClientSettings(null, wrong, null, true, "localhost"), v(v));
        Throwable e = catchThrowable(() -> session(client, "--tls=require", "--tls-psk=" + dir.resolve(Setup.PSK_FILE)));
        assertThat(e).isInstanceOf(TlsException.class).hasMessageStartingWith("PSK handshake failed: the server").hasMessageContaining("'alice'");
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void pskWithAnIdentityTheServerDoesNotKnow(Version v) throws Exception {
        Path stranger = dir.resolve("stranger.psk");
        TestPki.writePsk(stranger, "mallory");
        TlsClient client = ClientContext.load(new TlsClientSettings(null, stranger, null, true, "localhost"), v(v));
        Throwable e = catchThrowable(() -> session(client, "--tls=require", "--tls-psk=" + dir.resolve(Setup.PSK_FILE)));
        assertThat(e).isInstanceOf(TlsException.class).hasMessageStartingWith("PSK handshake failed: the server").hasMessageContaining("'mallory'");
    }

    @Test
    void beforeStarttlsNbdkitRequiresTls() throws Exception {
        int port = ExternalPeer.freePort();
        try (ExternalPeer nbdkit = ExternalPeer.nbdkit(port, "--tls=require", "--tls-psk=" + dir.resolve(Setup.PSK_FILE), "memory", "1M");
             SocketChannel socket = SocketChannel.open(new InetSocketAddress(InetAddress.getLoopbackAddress(), port))) {
            NbdWire.Stream s = NbdWire.Stream.of(socket);
            NbdWire.greet(s);
            NbdWire.sendOption(s, NbdWire.NBD_OPT_LIST, ByteBuffer.allocate(0));
            assertThat(NbdWire.readReply(s).type()).isEqualTo(NbdWire.NBD_REP_ERR_TLS_REQD);
        }
    }

    /** One NBD session with TLS against a fresh nbdkit: the negotiated description. */
    private static String session(TlsClient client, String... tlsArgs) throws Exception {
        int port = ExternalPeer.freePort();
        String[] args = java.util.stream.Stream.concat(java.util.Arrays.stream(tlsArgs), java.util.stream.Stream.of("memory", "1M"))
            .toArray(String[]::new);
        try (ExternalPeer nbdkit = ExternalPeer.nbdkit(port, args);
             SocketChannel socket = SocketChannel.open(new InetSocketAddress(InetAddress.getLoopbackAddress(), port))) {
            NbdWire.startTls(socket);
            SecureChannel tls = client.connect(new SocketRawChannel(socket));
            NbdWire.Stream s = NbdWire.Stream.of(tls);
            assertThat(NbdWire.go(s)).isEqualTo(SIZE);
            byte[] data = new byte[200_000]; // several records each way
            new Random(7).nextBytes(data);
            assertThat(NbdWire.writeReadDisconnect(s, 4096, data)).isEqualTo(data);
            tls.close();
            return tls.description();
        }
    }
}
