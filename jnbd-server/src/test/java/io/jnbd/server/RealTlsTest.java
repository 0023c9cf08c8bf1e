package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.protocol.Nbd;
import io.jnbd.tls.SecureChannel;
import io.jnbd.tls.TestPki;
import io.jnbd.tls.TlsClientSettings;
import io.jnbd.tls.TlsServer;
import io.jnbd.tls.TlsServerSettings;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The server with jnbd-tls's real TLS, X.509 and PSK, against jnbd-tls's client: round trips, the credentials a
 * client can get wrong (each ends only that connection), a second STARTTLS, and allow lists by certificate name
 * and PSK identity.
 */
@Timeout(60)
class RealTlsTest {
    @TempDir
    Path dir;
    private NbdServer server;
    private SocketAddress address;

    private void start(TlsServerSettings settings, String... specs) throws Exception {
        List<Export> exports = new ArrayList<>();
        for (String spec : specs) exports.add(ExportSpec.parse(spec).openExport());
        server = new NbdServer(new Exports(exports, null), ServerConfig.defaults(),
            new ServerTls(ServerTls.Mode.REQUIRE, TlsServer.load(settings)));
        address = server.listen(new InetSocketAddress("127.0.0.1", 0));
    }

    @AfterEach
    void stop() {
        if (server != null) server.stop(Duration.ofSeconds(5));
    }

    private RawClient greeted() throws IOException {
        RawClient c = RawClient.connect(address);
        c.greeting();
        c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        return c;
    }

    /** A full session: TLS, then a 1 MiB write and read back through a file export (no sendfile under TLS). */
    private void roundTrip(TlsClientSettings settings, String export) throws IOException {
        try (RawClient c = greeted()) {
            RealTls.startTls(c, settings);
            c.negotiateAfterGreeting(export, true);
            byte[] data = ServerFixture.pattern(7, 1 << 20);
            assertThat(c.write(1 << 20, data, 0)).isZero();
            assertThat(c.read(1 << 20, data.length)).isEqualTo(data);
            c.disconnect();
        }
    }

    /** The session must not come about: the handshake, or the first exchange after it, fails. */
    private void refused(TlsClientSettings settings) throws IOException {
        try (RawClient c = greeted()) {
            assertThat(c.option(Nbd.OPT_STARTTLS, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            assertThatThrownBy(() -> {
                RealTls.handshake(c, settings);
                c.optionUntilFinal(Nbd.OPT_LIST, new byte[0]); // TLS 1.3: a refused client certificate shows here
            }).isInstanceOf(IOException.class);
        }
    }

    @Test
    void x509WithAClientCertificate() throws Exception {
        TestPki.create(dir);
        start(new TlsServerSettings(dir, null, true), "disk=file:" + dir.resolve("disk.img") + ",size=8M");
        roundTrip(RealTls.x509(dir), "disk");
    }

    @Test
    void pskOnly() throws Exception {
        Path keys = dir.resolve("keys.psk");
        TestPki.writePsk(keys, "alice", "bob");
        start(new TlsServerSettings(null, keys, false), "mem=memory:8M");
        roundTrip(RealTls.psk(keys, "bob"), "mem");
    }

    @Test
    void aSecondStartTlsIsInvalidOverTls() throws Exception {
        TestPki.create(dir);
        start(new TlsServerSettings(dir, null, false), "mem=memory:8M");
        try (RawClient c = greeted()) {
            RealTls.startTls(c, RealTls.x509(dir));
            assertThat(c.option(Nbd.OPT_STARTTLS, new byte[0]).type()).isEqualTo(Nbd.REP_ERR_INVALID);
            c.negotiateAfterGreeting("mem", false);
            c.disconnect();
        }
    }

    @Test
    void aClientThatTrustsAnotherCaFailsAndOthersAreServed() throws Exception {
        TestPki.create(dir);
        Path other = Files.createDirectories(dir.resolve("other"));
        TestPki.create(other);
        start(new TlsServerSettings(dir, null, false), "mem=memory:8M");
        refused(RealTls.x509(other));
        roundTrip(RealTls.x509(dir), "mem");
    }

    @Test
    void verifyPeerRefusesAClientWithoutACertificate() throws Exception {
        TestPki.create(dir);
        Path caOnly = Files.createDirectories(dir.resolve("ca-only"));
        Files.copy(dir.resolve(TestPki.CA_CERT), caOnly.resolve(TestPki.CA_CERT));
        start(new TlsServerSettings(dir, null, true), "mem=memory:8M");
        refused(RealTls.x509(caOnly));
        roundTrip(RealTls.x509(dir), "mem");
    }

    @Test
    void verifyPeerRefusesAClientCertificateFromAnotherCa() throws Exception {
        TestPki.create(dir);
        Path mixed = Files.createDirectories(dir.resolve("mixed"));
        TestPki.newCa("stranger CA").writeClient(mixed, "client", TestPki.Validity.CURRENT, TestPki.KeyFormat.PKCS8);
        Files.copy(dir.resolve(TestPki.CA_CERT), mixed.resolve(TestPki.CA_CERT));
        start(new TlsServerSettings(dir, null, true), "mem=memory:8M");
        refused(RealTls.x509(mixed));
    }

    @Test
    void aWrongPskKeyAndAnUnknownIdentityAreRefused() throws Exception {
        Path keys = dir.resolve("keys.psk");
        TestPki.writePsk(keys, "alice");
        Path wrongKey = dir.resolve("wrong.psk");
        TestPki.writePsk(wrongKey, "alice");
        Path stranger = dir.resolve("stranger.psk");
        TestPki.writePsk(stranger, "mallory");
        start(new TlsServerSettings(null, keys, false), "mem=memory:8M");
        refused(RealTls.psk(wrongKey, "alice"));
        refused(RealTls.psk(stranger, "mallory"));
        roundTrip(RealTls.psk(keys, "alice"), "mem");
    }

    @Test
    void allowListsByCertificateNameAndPskIdentity() throws Exception {
        TestPki pki = TestPki.newCa("jnbd test CA");
        pki.writeAll(dir, "localhost", "alice");
        Path bobDir = Files.createDirectories(dir.resolve("bob"));
        pki.writeCa(bobDir);
        pki.writeClient(bobDir, "bob", TestPki.Validity.CURRENT, TestPki.KeyFormat.PKCS8);
        Path keys = dir.resolve("keys.psk");
        TestPki.writePsk(keys, "carol", "dave");
        start(new TlsServerSettings(dir, keys, true), "secret=memory:8M,allow=alice;carol", "open=memory:8M");
        for (TlsClientSettings allowed : List.of(RealTls.x509(dir), RealTls.psk(keys, "carol"))) {
            try (RawClient c = greeted()) {
                SecureChannel s = RealTls.startTls(c, allowed);
                assertThat(names(c)).as("listed for %s", s.description()).containsExactly("secret", "open");
                c.negotiateAfterGreeting("secret", false);
                c.disconnect();
            }
        }
        for (TlsClientSettings other : List.of(RealTls.x509(bobDir), RealTls.psk(keys, "dave"))) {
            try (RawClient c = greeted()) {
                RealTls.startTls(c, other);
                assertThat(names(c)).containsExactly("open");
                assertThat(c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("secret", List.of())).getLast().type())
                    .isEqualTo(Nbd.REP_ERR_POLICY);
            }
        }
    }

    private static List<String> names(RawClient c) throws IOException {
        List<String> out = new ArrayList<>();
        for (RawClient.OptionReply r : c.optionUntilFinal(Nbd.OPT_LIST, new byte[0])) {
            if (r.type() != Nbd.REP_SERVER) continue;
            byte[] name = new byte[r.data().getInt(0)];
            r.data().get(4, name);
            out.add(new String(name, java.nio.charset.StandardCharsets.UTF_8));
        }
        return out;
    }
}
