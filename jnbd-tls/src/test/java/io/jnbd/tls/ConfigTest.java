package io.jnbd.tls;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Loading: the key formats certtool and openssl write, and one line naming the file for each thing that is wrong. */
class ConfigTest {
    @TempDir
    Path dir;

    private static TlsServer server(Path dir, boolean verifyPeer) throws TlsConfigException {
        return TlsServer.load(new TlsServerSettings(dir, null, verifyPeer));
    }

    @Test
    void describesWhatItServes() throws Exception {
        TestPki.create(dir);
        assertThat(server(dir, false).describe()).isEqualTo("X.509 (CN=localhost)");
        assertThat(server(dir, true).describe()).isEqualTo("X.509 (CN=localhost), client certificates required");
        TestPki.writePsk(dir.resolve("k.psk"), "alice");
        assertThat(TlsServer.load(new TlsServerSettings(null, dir.resolve("k.psk"), false)).describe()).isEqualTo("PSK (1 identity)");
    }

    @Test
    void pkcs1RsaAndSec1EcKeysLoadAndServe() throws Exception {
        TestPki ca = TestPki.create(dir);
        for (TestPki.KeyFormat f : TestPki.KeyFormat.values()) {
            ca.writeServer(dir, "localhost", TestPki.Validity.CURRENT, f);
            assertThat(Files.readString(dir.resolve(TestPki.SERVER_KEY))).startsWith(switch (f) {
                case PKCS8 -> "-----BEGIN PRIVATE KEY-----";
                case SEC1_EC -> "-----BEGIN EC PRIVATE KEY-----";
                case PKCS1_RSA -> "-----BEGIN RSA PRIVATE KEY-----";
            });
            try (Loopback net = Loopback.open();
                 var s = net.handshake(server(dir, false), TlsClient.load(new TlsClientSettings(dir, null, null, true, "localhost")))) {
                assertThat(s.client().peerIdentities()).first().isEqualTo("localhost");
            }
        }
    }

    @Test
    void missingFilesAreNamed() throws Exception {
        TestPki.create(dir);
        Files.delete(dir.resolve(TestPki.SERVER_KEY));
        assertThatThrownBy(() -> server(dir, false)).isInstanceOf(TlsConfigException.class)
            .hasMessage(dir.resolve(TestPki.SERVER_KEY) + ": no such file");
        TestPki.create(dir);
        Files.delete(dir.resolve(TestPki.CA_CERT));
        assertThat(server(dir, false)).as("ca-cert.pem matters only to verify clients").isNotNull();
        assertThatThrownBy(() -> server(dir, true)).hasMessage(dir.resolve(TestPki.CA_CERT) + ": no such file");
        assertThatThrownBy(() -> TlsClient.load(new TlsClientSettings(dir, null, null, true, "localhost")))
            .hasMessage(dir.resolve(TestPki.CA_CERT) + ": no such file");
    }

    @Test
    void aKeyThatIsNotTheCertificatesOwn() throws Exception {
        TestPki.create(dir);
        Path other = Files.createDirectory(dir.resolve("other"));
        TestPki.create(other);
        Files.copy(other.resolve(TestPki.SERVER_KEY), dir.resolve(TestPki.SERVER_KEY), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        assertThatThrownBy(() -> server(dir, false)).isInstanceOf(TlsConfigException.class)
            .hasMessage(dir.resolve(TestPki.SERVER_KEY) + ": this key does not belong to the certificate in " + dir.resolve(TestPki.SERVER_CERT));
    }

    @Test
    void ownCertificatesOutOfTheirValidityPeriod() {
        TestPki ca = TestPki.create(dir);
        ca.writeServer(dir, "localhost", TestPki.Validity.EXPIRED, TestPki.KeyFormat.PKCS8);
        assertThatThrownBy(() -> server(dir, false)).isInstanceOf(TlsConfigException.class)
            .hasMessageMatching(".*server-cert.pem: certificate 'CN=localhost' expired on 20.*Z");
        ca.writeServer(dir, "localhost", TestPki.Validity.CURRENT, TestPki.KeyFormat.PKCS8);
        ca.writeClient(dir, "client", TestPki.Validity.NOT_YET_VALID, TestPki.KeyFormat.PKCS8);
        assertThatThrownBy(() -> TlsClient.load(new TlsClientSettings(dir, null, null, true, "localhost")))
            .isInstanceOf(TlsConfigException.class).hasMessageMatching(".*client-cert.pem: certificate 'CN=client' is not valid before 20.*Z");
    }

    @Test
    void notPem() throws Exception {
        TestPki.create(dir);
        Files.writeString(dir.resolve(TestPki.SERVER_CERT), "hello\n");
        assertThatThrownBy(() -> server(dir, false)).hasMessage(dir.resolve(TestPki.SERVER_CERT) + ": no PEM certificate in it");
    }

    @Test
    void pskFiles() throws Exception {
        Path f = dir.resolve("keys.psk");
        Files.writeString(f, "\nalice:00ff10\n\nbob:0a0b\n");
        PskFile keys = PskFile.load(f);
        assertThat(keys.keys().keySet()).containsExactly("alice", "bob");
        assertThat(keys.key("alice")).containsExactly(0x00, 0xff, 0x10);

        Files.writeString(f, "alice:00ff\nbob:0a0b\nno key here\n");
        assertThatThrownBy(() -> PskFile.load(f)).isInstanceOf(TlsConfigException.class)
            .hasMessage(f + " line 3: expected identity:hexkey (as psktool writes)");
        Files.writeString(f, "alice:0g\n");
        assertThatThrownBy(() -> PskFile.load(f)).hasMessage(f + " line 1: the key of 'alice' is not an even number of hex digits");
        Files.writeString(f, "alice:00\nalice:01\n");
        assertThatThrownBy(() -> PskFile.load(f)).hasMessage(f + " line 2: identity 'alice' appears twice");
        Files.writeString(f, "\n\n");
        assertThatThrownBy(() -> PskFile.load(f)).hasMessage(f + ": no identity:hexkey line in it");
        assertThatThrownBy(() -> PskFile.load(dir.resolve("absent.psk"))).hasMessage(dir.resolve("absent.psk") + ": no such file");
    }
}
