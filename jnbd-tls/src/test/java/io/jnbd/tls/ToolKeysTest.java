package io.jnbd.tls;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Keys and certificates as the real tools write them (certtool's default PKCS#8 and its RSA keys, openssl's SEC1
 * EC and PKCS#1 RSA keys), loaded and served. Skipped for a tool that is not installed.
 */
class ToolKeysTest {
    @TempDir
    Path dir;

    @Test
    void certtoolKeys() throws Exception {
        assumeTrue(ExternalPeer.onPath("certtool"), "certtool is not installed (Debian: gnutls-bin)");
        for (String type : List.of("ecdsa", "rsa")) {
            Path d = Files.createDirectories(dir.resolve("certtool-" + type));
            Path template = d.resolve("template");
            Files.writeString(template, "cn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\nexpiration_days = 2\n"
                + "tls_www_server\nsigning_key\nencryption_key\nca\ncert_signing_key\n");
            run(List.of("certtool", "--generate-privkey", "--key-type=" + type, "--outfile", d.resolve(TestPki.SERVER_KEY).toString()));
            run(List.of("certtool", "--generate-self-signed", "--load-privkey", d.resolve(TestPki.SERVER_KEY).toString(),
                "--template", template.toString(), "--outfile", d.resolve(TestPki.SERVER_CERT).toString()));
            Files.copy(d.resolve(TestPki.SERVER_CERT), d.resolve(TestPki.CA_CERT));
            serve(d);
        }
    }

    @Test
    void opensslTraditionalKeys() throws Exception {
        assumeTrue(ExternalPeer.onPath("openssl"), "openssl is not installed");
        List<List<String>> keyCommands = List.of(
            List.of("openssl", "ecparam", "-genkey", "-name", "prime256v1", "-out"),             // EC PARAMETERS + EC PRIVATE KEY
            List.of("openssl", "genrsa", "-traditional", "-out"));                               // RSA PRIVATE KEY
        for (int i = 0; i < keyCommands.size(); i++) {
            Path d = Files.createDirectories(dir.resolve("openssl-" + i));
            List<String> gen = new ArrayList<>(keyCommands.get(i));
            gen.add(d.resolve(TestPki.SERVER_KEY).toString());
            if (i == 1) gen.add("2048");
            run(gen);
            assertThat(Files.readString(d.resolve(TestPki.SERVER_KEY))).contains(i == 0 ? "BEGIN EC PRIVATE KEY" : "BEGIN RSA PRIVATE KEY");
            run(List.of("openssl", "req", "-new", "-x509", "-key", d.resolve(TestPki.SERVER_KEY).toString(), "-days", "2",
                "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "-out", d.resolve(TestPki.SERVER_CERT).toString()));
            Files.copy(d.resolve(TestPki.SERVER_CERT), d.resolve(TestPki.CA_CERT));
            serve(d);
        }
    }

    private static void serve(Path d) throws Exception {
        TlsServer server = TlsServer.load(new TlsServerSettings(d, null, false));
        TlsClient client = TlsClient.load(new TlsClientSettings(d, null, null, true, "localhost"));
        try (Loopback net = Loopback.open(); var s = net.handshake(server, client)) {
            assertThat(s.client().peerIdentities()).startsWith("localhost");
        }
    }

    private static void run(List<String> command) throws Exception {
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertThat(p.waitFor(60, TimeUnit.SECONDS)).isTrue();
        assertThat(p.exitValue()).as("%s: %s", command, out).isZero();
    }
}
