package io.jnbd.tls;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Our server against GnuTLS's client, gnutls-cli (3.7, the library nbdkit, libnbd and QEMU use): PSK at TLS 1.3
 * (external PSK, SHA-256 binders) and 1.2, X.509 with and without a client certificate, and the errors a GnuTLS
 * client with the wrong key or an unknown identity gets. Skipped without gnutls-cli (Debian: gnutls-bin).
 */
@Timeout(60)
class GnutlsCliTest {
    private static final String PSK_PRIORITY = "NORMAL:+ECDHE-PSK:+DHE-PSK:+PSK";

    @TempDir
    static Path dir;
    static Map<String, byte[]> keys;

    @BeforeAll
    static void needGnutlsCli() {
        assumeTrue(ExternalPeer.onPath("gnutls-cli"), "gnutls-cli is not installed (Debian: gnutls-bin); skipping");
        TestPki.create(dir);
        keys = TestPki.writePsk(dir.resolve("keys.psk"), "alice", "bob");
    }

    enum Version { TLS13, TLS12 }

    private static String only(Version v) {
        return v == Version.TLS12 ? ":-VERS-ALL:+VERS-TLS1.2" : ":-VERS-ALL:+VERS-TLS1.3";
    }

    /**
     * The PSK key exchanges GnuTLS and we share. With GnuTLS's defaults TLS 1.2 lands on DHE-PSK with AES-GCM
     * (GnuTLS has no ECDHE-PSK with AES-GCM; BouncyCastle over the JDK's ciphers has no ChaCha20); ECDHE-PSK needs
     * its CBC-SHA256/384 suites allowed. gnutls-cli 3.7.9 itself crashes right after a TLS 1.2 (EC)DHE-PSK
     * handshake, printing the PSK hint (against gnutls-serv as well), so for those the test stops at the handshake
     * both ends report done.
     */
    enum Kx {
        TLS13("NORMAL:+ECDHE-PSK:+DHE-PSK:+PSK:-VERS-ALL:+VERS-TLS1.3", "TLSv1.3 TLS_AES_128_GCM_SHA256", false),
        TLS12_DHE_PSK("NORMAL:+ECDHE-PSK:+DHE-PSK:+PSK:-VERS-ALL:+VERS-TLS1.2", "TLSv1.2 TLS_DHE_PSK_WITH_AES_256_GCM_SHA384", true),
        TLS12_ECDHE_PSK("NORMAL:-KX-ALL:+ECDHE-PSK:+SHA256:+SHA384:-VERS-ALL:+VERS-TLS1.2", "TLSv1.2 TLS_ECDHE_PSK_WITH_AES_256_CBC_SHA384", true),
        TLS12_PSK("NORMAL:-KX-ALL:+PSK:-VERS-ALL:+VERS-TLS1.2", "TLSv1.2 TLS_PSK_WITH_AES_256_GCM_SHA384", false);

        final String priority;
        final String expected;
        final boolean cliCrashes;

        Kx(String priority, String expected, boolean cliCrashes) {
            this.priority = priority;
            this.expected = expected;
            this.cliCrashes = cliCrashes;
        }
    }

    @ParameterizedTest
    @EnumSource(Kx.class)
    void psk(Kx kx) throws Exception {
        TlsServer server = TlsServer.load(new TlsServerSettings(null, dir.resolve("keys.psk"), false));
        SecureChannel s = exchange(server, kx.cliCrashes, "--priority=" + kx.priority, "--pskusername=bob",
            "--pskkey=" + HexFormat.of().formatHex(keys.get("bob")));
        assertThat(s.peerIdentities()).containsExactly("bob");
        assertThat(s.description()).startsWith(kx.expected);
    }

    @ParameterizedTest
    @EnumSource(Kx.class)
    void pskOnAServerWithCertificatesToo(Kx kx) throws Exception {
        TlsServer server = TlsServer.load(new TlsServerSettings(dir, dir.resolve("keys.psk"), false));
        SecureChannel s = exchange(server, kx.cliCrashes, "--priority=" + kx.priority, "--pskusername=alice",
            "--pskkey=" + HexFormat.of().formatHex(keys.get("alice")));
        assertThat(s.peerIdentities()).containsExactly("alice");
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void x509(Version v) throws Exception {
        TlsServer server = TlsServer.load(new TlsServerSettings(dir, null, false));
        SecureChannel s = exchange(server, false, "--priority=NORMAL" + only(v), "--x509cafile=" + dir.resolve(TestPki.CA_CERT),
            "--verify-hostname=localhost");
        assertThat(s.description()).startsWith(v == Version.TLS13 ? "TLSv1.3 " : "TLSv1.2 ");
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void x509WithAClientCertificate(Version v) throws Exception {
        TlsServer server = TlsServer.load(new TlsServerSettings(dir, null, true));
        SecureChannel s = exchange(server, false, "--priority=NORMAL" + only(v), "--x509cafile=" + dir.resolve(TestPki.CA_CERT),
            "--verify-hostname=localhost", "--x509certfile=" + dir.resolve(TestPki.CLIENT_CERT),
            "--x509keyfile=" + dir.resolve(TestPki.CLIENT_KEY));
        assertThat(s.peerIdentities()).containsExactly("client");
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void pskWithTheWrongKey(Version v) throws Exception {
        TlsServer server = TlsServer.load(new TlsServerSettings(null, dir.resolve("keys.psk"), false));
        Throwable e = catchThrowable(() -> exchange(server, false, "--priority=" + PSK_PRIORITY + only(v), "--pskusername=alice",
            "--pskkey=" + "00".repeat(32)));
        assertThat(e).isInstanceOf(TlsException.class).hasMessage("PSK handshake failed: bad key for 'alice'");
    }

    @ParameterizedTest
    @EnumSource(Version.class)
    void pskWithAnUnknownIdentity(Version v) throws Exception {
        TlsServer server = TlsServer.load(new TlsServerSettings(null, dir.resolve("keys.psk"), false));
        Throwable e = catchThrowable(() -> exchange(server, false, "--priority=" + PSK_PRIORITY + only(v), "--pskusername=mallory",
            "--pskkey=" + "00".repeat(32)));
        assertThat(e).isInstanceOf(TlsException.class).hasMessage("unknown PSK identity 'mallory'");
    }

    @Test
    void verifyPeerWithoutAClientCertificate() throws Exception {
        TlsServer server = TlsServer.load(new TlsServerSettings(dir, null, true));
        Throwable e = catchThrowable(() -> exchange(server, false, "--priority=NORMAL", "--x509cafile=" + dir.resolve(TestPki.CA_CERT),
            "--verify-hostname=localhost"));
        assertThat(e).isInstanceOf(TlsException.class).hasMessageContaining("the client sent no certificate");
    }

    /**
     * gnutls-cli's inline command ^rekey^ sends a TLS 1.3 KeyUpdate that asks for ours in return: each engine must
     * read on with the client's new keys and answer before its next data, which GnuTLS must read with ours.
     */
    @Test
    void keyUpdatesFromGnutlsBothWays() throws Exception {
        Version v = Version.TLS13;
        String pskKey = "--pskkey=" + HexFormat.of().formatHex(keys.get("alice"));
        List<List<String>> clients = List.of(
            List.of("--priority=" + PSK_PRIORITY + only(v), "--pskusername=alice", pskKey),
            List.of("--priority=NORMAL" + only(v), "--x509cafile=" + dir.resolve(TestPki.CA_CERT), "--verify-hostname=localhost"));
        List<TlsServer> servers = List.of(TlsServer.load(new TlsServerSettings(null, dir.resolve("keys.psk"), false)),
            TlsServer.load(new TlsServerSettings(dir, null, false)));
        for (int i = 0; i < 2; i++) {
            try (ServerSocketChannel listener = ServerSocketChannel.open()) {
                listener.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
                List<String> cmd = new ArrayList<>(List.of("stdbuf", "-oL", "gnutls-cli", "--inline-commands", "-d", "4", "-p",
                    String.valueOf(((InetSocketAddress) listener.getLocalAddress()).getPort())));
                cmd.addAll(clients.get(i));
                cmd.add("127.0.0.1");
                try (ExternalPeer cli = ExternalPeer.start(cmd); SocketChannel socket = listener.accept()) {
                    SecureChannel s = Loopback.await(Loopback.acceptAsync(servers.get(i), new SocketRawChannel(socket)));
                    OutputStream stdin = cli.process.getOutputStream();
                    stdin.write("^rekey^\n".getBytes(StandardCharsets.US_ASCII));
                    stdin.flush();
                    awaitOutput(cli, "Rekey was completed");
                    stdin.write("after\n".getBytes(StandardCharsets.US_ASCII));
                    stdin.flush();
                    assertThat(RoundTripTest.readAscii(s, 6)).isEqualTo("after\n");
                    s.write(ByteBuffer.wrap("answered with new keys\n".getBytes(StandardCharsets.US_ASCII)));
                    s.close();
                    assertThat(cli.awaitExit(10)).isTrue();
                    assertThat(cli.output()).as(s.description()).contains("received TLS 1.3 key update").contains("answered with new keys");
                }
            }
        }
    }

    private static void awaitOutput(ExternalPeer cli, String text) throws InterruptedException {
        while (!cli.output().contains(text)) {
            if (!cli.process.isAlive()) throw new AssertionError("gnutls-cli exited: " + cli.output());
            Thread.sleep(20);
        }
    }

    /**
     * Accepts one gnutls-cli connection with {@code server}, then: our line to it, its line (from its standard input)
     * to us, close_notify. The session, once gnutls-cli printed our line and exited.
     */
    private static SecureChannel exchange(TlsServer server, boolean handshakeOnly, String... cliArgs) throws Exception {
        try (ServerSocketChannel listener = ServerSocketChannel.open()) {
            listener.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            int port = ((InetSocketAddress) listener.getLocalAddress()).getPort();
            // Line-buffered, so that what it printed survives a crash.
            List<String> cmd = new ArrayList<>(List.of("stdbuf", "-oL", "gnutls-cli", "-p", String.valueOf(port)));
            cmd.addAll(List.of(cliArgs));
            cmd.add("127.0.0.1");
            try (ExternalPeer cli = ExternalPeer.start(cmd); SocketChannel socket = listener.accept()) {
                CompletableFuture<SecureChannel> accepted = Loopback.acceptAsync(server, new SocketRawChannel(socket));
                SecureChannel s;
                try {
                    s = Loopback.await(accepted);
                } catch (TlsException e) {
                    cli.awaitExit(10);
                    throw e;
                }
                if (handshakeOnly) {
                    cli.awaitExit(10);
                    assertThat(cli.output()).as("gnutls-cli reports the handshake done").contains("- Description: (TLS1.2-");
                    return s;
                }
                s.write(ByteBuffer.wrap("hello from jnbd\n".getBytes(StandardCharsets.US_ASCII)));
                OutputStream stdin = cli.process.getOutputStream();
                try {
                    stdin.write("hello from gnutls\n".getBytes(StandardCharsets.US_ASCII));
                    stdin.flush();
                } catch (java.io.IOException e) {
                    cli.awaitExit(10);
                    throw new AssertionError("gnutls-cli is gone after the handshake (" + s.description() + "): " + cli.output(), e);
                }
                assertThat(RoundTripTest.readAscii(s, 18)).isEqualTo("hello from gnutls\n");
                s.close();
                assertThat(cli.awaitExit(10)).as("gnutls-cli exits at close_notify: %s", cli.output()).isTrue();
                assertThat(cli.output()).contains("hello from jnbd");
                return s;
            }
        }
    }
}
