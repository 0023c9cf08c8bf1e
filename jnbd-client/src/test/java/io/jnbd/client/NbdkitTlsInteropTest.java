package io.jnbd.client;

import io.jnbd.tls.TestPki;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The client's TLS against nbdkit ({@code --tls=require}): X.509 with and without client certificates, PSK,
 * a Unix socket, and the certificates, keys and servers it must refuse. Certificates come from TestPki.
 */
class NbdkitTlsInteropTest {

    @TempDir
    Path dir;
    private Path pki;
    private TestPki ca;
    private final List<Peer> peers = new ArrayList<>();

    @BeforeEach
    void makePki() throws Exception {
        Peer.assumeInterop("nbdkit");
        pki = Files.createDirectory(dir.resolve("pki"));
        ca = TestPki.create(pki);
    }

    @AfterEach
    void stopPeers() {
        for (Peer p : peers) p.close();
    }

    private Peer nbdkit(String... args) throws Exception {
        int port = Peer.freePort();
        Peer p = Peer.start(port, Peer.nbdkit(port, args));
        peers.add(p);
        return p;
    }

    private static String nbds(String userAndHost, Peer p, String query) {
        return "nbds://" + userAndHost + ":" + p.port + "/?" + query;
    }

    @Test
    void x509EveryCallOnAFileAndMultiConn() throws Exception {
        Path file = QemuNbdAndNbdServerInteropTest.image(dir);
        Peer p = nbdkit("--tls=require", "--tls-certificates=" + pki, "file", "file=" + file);
        QemuNbdAndNbdServerInteropTest.exercise(nbds("localhost", p, "tls-certificates=" + pki), file);

        Peer memory = nbdkit("--tls=require", "--tls-certificates=" + pki, "memory", "size=16M");
        try (NbdClient c = NbdClient.connect(URI.create(nbds("127.0.0.1", memory, "tls-certificates=" + pki)),
            ClientOptions.defaults().withConnections(3))) {
            assertThat(c.connectionCount()).isEqualTo(3);
            assertThat(c.tls()).startsWith("TLS");
            List<CompletableFuture<Void>> writes = new ArrayList<>();
            for (int i = 0; i < 24; i++) {
                ByteBuffer buf = ByteBuffer.allocateDirect(256 * 1024);
                for (int j = 0; j < buf.capacity(); j++) buf.put(j, (byte) (i * 11 + j));
                writes.add(c.write(i * 256 * 1024L, buf, false));
            }
            CompletableFuture.allOf(writes.toArray(CompletableFuture[]::new)).get(60, TimeUnit.SECONDS);
            ByteBuffer all = ByteBuffer.allocateDirect(24 * 256 * 1024);
            c.blocking().read(0, all);
            for (int i = 0; i < 24; i++) {
                for (int j = 0; j < 256 * 1024; j += 1021) assertThat(all.get(i * 256 * 1024 + j)).isEqualTo((byte) (i * 11 + j));
            }
        }
        assertThat(NbdClient.list(URI.create(nbds("localhost", memory, "tls-certificates=" + pki)))).hasSize(1);
    }

    @Test
    void clientCertificateWhenNbdkitVerifiesPeers() throws Exception {
        Peer p = nbdkit("--tls=require", "--tls-certificates=" + pki, "--tls-verify-peer", "memory", "size=1M");
        try (NbdClient c = NbdClient.connect(nbds("localhost", p, "tls-certificates=" + pki))) {
            c.blocking().write(0, ByteBuffer.wrap("signed".getBytes()), true);
            ByteBuffer back = ByteBuffer.allocate(6);
            c.blocking().read(0, back);
            assertThat(new String(back.array())).isEqualTo("signed");
        }
        Path caOnly = Files.createDirectory(dir.resolve("ca-only"));
        ca.writeCa(caOnly);
        assertThatThrownBy(() -> NbdClient.connect(nbds("localhost", p, "tls-certificates=" + caOnly)))
            .isInstanceOf(NbdConnectionException.class).hasMessageStartingWith("TLS handshake with localhost:" + p.port + " failed: ");
    }

    @Test
    void pskWithTheUsersIdentityAndWrongKeysRefused() throws Exception {
        Path keys = dir.resolve("keys.psk");
        TestPki.writePsk(keys, "alice", "bob");
        Peer p = nbdkit("--tls=require", "--tls-psk=" + keys, "memory", "size=1M");
        try (NbdClient c = NbdClient.connect(nbds("bob@127.0.0.1", p, "tls-psk-file=" + keys))) {
            assertThat(c.tls()).startsWith("TLS");
            ByteBuffer data = ByteBuffer.allocateDirect(64 * 1024);
            for (int i = 0; i < data.capacity(); i++) data.put(i, (byte) (i * 3));
            c.blocking().write(4096, data, false);
            ByteBuffer back = ByteBuffer.allocateDirect(64 * 1024);
            c.blocking().read(4096, back);
            assertThat(back.flip()).isEqualTo(data.flip());
        }
        Path wrongKey = dir.resolve("wrong.psk");
        TestPki.writePsk(wrongKey, "alice");
        Path stranger = dir.resolve("stranger.psk");
        TestPki.writePsk(stranger, "mallory");
        for (String u : List.of(nbds("alice@127.0.0.1", p, "tls-psk-file=" + wrongKey), nbds("mallory@127.0.0.1", p, "tls-psk-file=" + stranger))) {
            assertThatThrownBy(() -> NbdClient.connect(u)).as(u).isInstanceOf(NbdConnectionException.class)
                .hasMessageStartingWith("TLS handshake with 127.0.0.1:" + p.port + " failed: ");
        }
    }

    @Test
    void certificatesTheClientMustRefuse() throws Exception {
        Peer p = nbdkit("--tls=require", "--tls-certificates=" + pki, "memory", "size=1M");
        String failed = "TLS handshake with localhost:" + p.port + " failed: ";
        Path otherCa = Files.createDirectory(dir.resolve("other-ca"));
        TestPki.newCa("another CA").writeCa(otherCa);
        assertThatThrownBy(() -> NbdClient.connect(nbds("localhost", p, "tls-certificates=" + otherCa)))
            .isInstanceOf(NbdConnectionException.class).hasMessageStartingWith(failed).hasMessageContaining("not signed");
        assertThatThrownBy(() -> NbdClient.connect(nbds("localhost", p, "tls-certificates=" + pki + "&tls-hostname=disk.example.org")))
            .isInstanceOf(NbdConnectionException.class).hasMessageStartingWith(failed).hasMessageContaining("disk.example.org");

        Path expired = Files.createDirectory(dir.resolve("expired"));
        ca.writeCa(expired);
        ca.writeServer(expired, "localhost", TestPki.Validity.EXPIRED, TestPki.KeyFormat.PKCS8);
        Peer old = nbdkit("--tls=require", "--tls-certificates=" + expired, "memory", "size=1M");
        assertThatThrownBy(() -> NbdClient.connect(nbds("localhost", old, "tls-certificates=" + expired)))
            .isInstanceOf(NbdConnectionException.class).hasMessageStartingWith("TLS handshake with localhost:" + old.port + " failed: ")
            .hasMessageContaining("expired");
    }

    @Test
    void withoutTlsOnOneSideTheOtherSaysSo() throws Exception {
        Peer plain = nbdkit("memory", "size=1M");
        assertThatThrownBy(() -> NbdClient.connect(nbds("localhost", plain, "tls-certificates=" + pki)))
            .isInstanceOf(NbdException.class).hasMessageStartingWith("server at localhost:" + plain.port + " does not offer TLS");
        Peer tls = nbdkit("--tls=require", "--tls-certificates=" + pki, "memory", "size=1M");
        assertThatThrownBy(() -> NbdClient.connect(tls.uri("")))
            .isInstanceOf(NbdException.class).hasMessageContaining("server requires TLS (use an nbds:// URI)");
    }

    @Test
    @SuppressWarnings("try") // the peer only has to live as long as the try block
    void unixSocketChecksTheNameGivenByTlsHostname() throws Exception {
        Path socket = dir.resolve("nbd.sock");
        try (Peer unix = Peer.startUnix(socket, List.of("nbdkit", "-f", "--exit-with-parent", "-U", socket.toString(),
            "--tls=require", "--tls-certificates=" + pki, "pattern", "size=1M"))) {
            String base = "nbds+unix:///?socket=" + socket + "&tls-certificates=" + pki;
            try (NbdClient c = NbdClient.connect(base + "&tls-hostname=localhost")) {
                ByteBuffer buf = ByteBuffer.allocate(4096);
                c.blocking().read(8192, buf);
                assertThat(buf.getLong(8)).isEqualTo(8200);
            }
            assertThatThrownBy(() -> NbdClient.connect(base + "&tls-hostname=elsewhere.example"))
                .isInstanceOf(NbdConnectionException.class).hasMessageContaining("elsewhere.example");
        }
    }
}
