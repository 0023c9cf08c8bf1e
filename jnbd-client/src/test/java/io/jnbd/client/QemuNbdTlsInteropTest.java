package io.jnbd.client;

import io.jnbd.tls.TestPki;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The client's TLS against qemu-nbd's tls-creds-x509 and tls-creds-psk objects, exporting a temporary file. */
class QemuNbdTlsInteropTest {

    @TempDir
    Path dir;
    private Path pki;
    private TestPki ca;
    private Peer peer;

    @BeforeEach
    void makePki() throws Exception {
        Peer.assumeInterop("qemu-nbd");
        pki = Files.createDirectory(dir.resolve("pki"));
        ca = TestPki.create(pki);
    }

    @AfterEach
    void stop() {
        if (peer != null) peer.close();
    }

    private Peer qemuNbd(Path file, String creds) throws Exception {
        int port = Peer.freePort();
        List<String> cmd = new ArrayList<>(List.of("qemu-nbd", "--object", creds, "--tls-creds", "tls0", "-f", "raw",
            "-x", "disk", "-b", "127.0.0.1", "-p", String.valueOf(port), "-t", "--shared=8", "--cache=none",
            "--discard=unmap", file.toString()));
        peer = Peer.start(port, cmd);
        return peer;
    }

    @Test
    void x509() throws Exception {
        Path file = QemuNbdAndNbdServerInteropTest.image(dir);
        Peer p = qemuNbd(file, "tls-creds-x509,id=tls0,endpoint=server,verify-peer=off,dir=" + pki);
        QemuNbdAndNbdServerInteropTest.exercise("nbds://localhost:" + p.port + "/disk?tls-certificates=" + pki, file);
    }

    @Test
    void x509WithClientCertificates() throws Exception {
        Path file = QemuNbdAndNbdServerInteropTest.image(dir);
        // verify-peer is on by default for QEMU's server credentials: the client must present a certificate.
        Peer p = qemuNbd(file, "tls-creds-x509,id=tls0,endpoint=server,dir=" + pki);
        QemuNbdAndNbdServerInteropTest.exercise("nbds://127.0.0.1:" + p.port + "/disk?tls-certificates=" + pki, file);
        Path caOnly = Files.createDirectory(dir.resolve("ca-only"));
        ca.writeCa(caOnly);
        assertThatThrownBy(() -> NbdClient.connect("nbds://127.0.0.1:" + p.port + "/disk?tls-certificates=" + caOnly))
            .isInstanceOf(NbdConnectionException.class).hasMessageStartingWith("TLS handshake with 127.0.0.1:" + p.port + " failed: ");
    }

    @Test
    void psk() throws Exception {
        Path file = QemuNbdAndNbdServerInteropTest.image(dir);
        Path keys = Files.createDirectory(dir.resolve("keys"));
        // QEMU reads the file named keys.psk in its credentials directory.
        TestPki.writePsk(keys.resolve("keys.psk"), "qemu", "alice");
        Peer p = qemuNbd(file, "tls-creds-psk,id=tls0,endpoint=server,dir=" + keys);
        QemuNbdAndNbdServerInteropTest.exercise("nbds://alice@127.0.0.1:" + p.port + "/disk?tls-psk-file=" + keys.resolve("keys.psk"), file);
    }
}
