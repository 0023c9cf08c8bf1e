package io.jnbd.interop;

import io.jnbd.tls.TestPki;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Certificates and keys for the TLS interop tests, made with {@link TestPki} in the layouts the peers read:
 * the server's directory ({@code ca-cert.pem}, {@code server-cert.pem}, {@code server-key.pem}), client
 * directories for libnbd's {@code tls-certificates=} and QEMU's {@code tls-creds-x509 dir=}, and psktool files
 * (QEMU's {@code tls-creds-psk} reads {@code keys.psk} in its directory).
 */
final class TlsFiles {
    final Path server;
    /** Client certificates of the server's CA, CN alice and CN bob. */
    final Path alice, bob;
    /** ca-cert.pem alone: the server is trusted, the client shows no certificate. */
    final Path caOnly;
    /** A client of another CA altogether: it trusts neither the server nor is trusted. */
    final Path stranger;
    /** keys.psk with alice and bob; wrong.psk gives alice another key; mallory.psk an identity the server lacks. */
    final Path psk, wrongPsk, malloryPsk;

    TlsFiles(Path dir) throws IOException {
        TestPki ca = TestPki.newCa("jnbd interop CA");
        server = Files.createDirectories(dir.resolve("server"));
        ca.writeCa(server);
        ca.writeServer(server, "localhost", TestPki.Validity.CURRENT, TestPki.KeyFormat.PKCS8);
        alice = client(ca, dir.resolve("alice"), "alice");
        bob = client(ca, dir.resolve("bob"), "bob");
        caOnly = Files.createDirectories(dir.resolve("ca-only"));
        ca.writeCa(caOnly);
        stranger = client(TestPki.newCa("another CA"), dir.resolve("stranger"), "alice");
        psk = Files.createDirectories(dir.resolve("psk")).resolve("keys.psk");
        TestPki.writePsk(psk, "alice", "bob");
        wrongPsk = Files.createDirectories(dir.resolve("wrong-psk")).resolve("keys.psk");
        TestPki.writePsk(wrongPsk, "alice");
        malloryPsk = Files.createDirectories(dir.resolve("mallory-psk")).resolve("keys.psk");
        TestPki.writePsk(malloryPsk, "mallory");
    }

    /** A server whose certificate expired, or is not valid yet: {@code jnbd serve} must refuse to start with it. */
    static Path serverWith(Path dir, TestPki.Validity validity) {
        TestPki ca = TestPki.newCa("jnbd interop CA");
        ca.writeCa(dir);
        ca.writeServer(dir, "localhost", validity, TestPki.KeyFormat.PKCS8);
        return dir;
    }

    private static Path client(TestPki ca, Path dir, String cn) throws IOException {
        Files.createDirectories(dir);
        ca.writeCa(dir);
        ca.writeClient(dir, cn, TestPki.Validity.CURRENT, TestPki.KeyFormat.PKCS8);
        return dir;
    }

    /** libnbd's URI for {@code export} over X.509 with the client directory {@code dir}. */
    static String x509Uri(int port, String export, Path dir) {
        return "nbds://127.0.0.1:" + port + "/" + export + "?tls-certificates=" + dir;
    }

    /** libnbd's URI for {@code export} over PSK as {@code identity}. */
    static String pskUri(int port, String export, String identity, Path pskFile) {
        return "nbds://" + identity + "@127.0.0.1:" + port + "/" + export + "?tls-psk-file=" + pskFile;
    }

    /** QEMU's --object for X.509 client credentials from {@code dir}. */
    static String qemuX509(Path dir) {
        return "tls-creds-x509,id=tls0,endpoint=client,dir=" + dir;
    }

    /** QEMU's --object for PSK credentials: {@code pskFile} must be called keys.psk. */
    static String qemuPsk(Path pskFile, String identity) {
        return "tls-creds-psk,id=tls0,endpoint=client,dir=" + pskFile.getParent() + ",username=" + identity;
    }

    /** QEMU's --image-opts for an export of a jnbd server on this host, through the credentials tls0. */
    static String qemuImage(int port, String export) {
        return "driver=nbd,host=127.0.0.1,port=" + port + ",export=" + export + ",tls-creds=tls0";
    }
}
