package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.tls.TestPki;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code jnbd serve}'s TLS settings as a user meets them: --help, one clear line and exit 2 for each setting that
 * cannot work (with nothing started: not even an export's file is created), and the config file's keys with the
 * command line winning over them.
 */
@Timeout(180)
class TlsCliInteropTest {
    private static final Duration T = Duration.ofSeconds(60);

    @TempDir
    Path dir;

    @BeforeEach
    void enabled() {
        Interop.requireEnabled();
    }

    /** jnbd serve on a free port with these arguments and an export whose file it would create. */
    private Interop.Result serve(String... args) {
        List<String> argv = new ArrayList<>(List.of(Interop.jnbd().toString(), "serve", "--listen", "127.0.0.1:" + Interop.freePort(),
            "--export", "x=file:" + dir.resolve("created.img") + ",size=1M"));
        argv.addAll(List.of(args));
        return Interop.run(T, dir, argv);
    }

    /** Exit 2, exactly one line naming {@code mentioned}, no stack trace, and nothing started. */
    private void refused(Interop.Result r, String mentioned) {
        assertThat(r.exitCode()).as(r.toString()).isEqualTo(2);
        assertThat(r.output()).as(r.toString()).doesNotContain("\tat ", "Exception in thread", "Caused by:");
        assertThat(r.output().lines().filter(l -> l.contains(mentioned)).count()).as("lines naming '%s' in%n%s", mentioned, r)
            .isEqualTo(1);
        assertThat(dir.resolve("created.img")).as("no export was opened").doesNotExist();
    }

    @Test
    void helpTeachesTlsAndAllowLists() {
        Interop.Result help = Interop.run(T, dir, Interop.jnbd().toString(), "serve", "--help");
        assertThat(help.exitCode()).isZero();
        assertThat(help.output()).contains("--tls ", "--tls-certificates", "--tls-verify-peer", "--tls-psk", "allow=",
            "ca-cert.pem", "server-cert.pem", "server-key.pem", "identity:hexkey",
            "jnbd serve --tls require", "nbds://");
    }

    @Test
    void tlsWithoutCertificatesOrPsk() {
        refused(serve("--tls", "require"), "--tls require needs --tls-certificates DIR or --tls-psk FILE");
    }

    @Test
    void anUnknownTlsMode() {
        refused(serve("--tls", "maybe"), "--tls: expected off, on or require, got \"maybe\"");
    }

    @Test
    void aCertificateDirectoryThatIsNotThere() {
        refused(serve("--tls", "on", "--tls-certificates", dir.resolve("nowhere").toString()), dir.resolve("nowhere").toString());
    }

    @Test
    void anExpiredServerCertificateIsRefusedAtStart() throws Exception {
        Path pki = TlsFiles.serverWith(Files.createDirectories(dir.resolve("expired")), TestPki.Validity.EXPIRED);
        Interop.Result r = serve("--tls", "require", "--tls-certificates", pki.toString());
        refused(r, "server-cert.pem");
        assertThat(r.output()).contains("expired on");
    }

    @Test
    void aServerCertificateNotValidYetIsRefusedAtStart() throws Exception {
        Path pki = TlsFiles.serverWith(Files.createDirectories(dir.resolve("future")), TestPki.Validity.NOT_YET_VALID);
        Interop.Result r = serve("--tls", "require", "--tls-certificates", pki.toString());
        refused(r, "server-cert.pem");
        assertThat(r.output()).contains("is not valid before");
    }

    @Test
    void aPskFileThatIsNotPsktools() throws Exception {
        Path keys = dir.resolve("keys.psk");
        Files.writeString(keys, "alice=00112233\n");
        refused(serve("--tls", "require", "--tls-psk", keys.toString()), keys.toString());
    }

    @Test
    void aBadAllowEntry() {
        List<String> argv = List.of(Interop.jnbd().toString(), "serve", "--listen", "127.0.0.1:" + Interop.freePort(),
            "--export", "m=memory:1M,allow=10.0.0.0/99");
        Interop.Result r = Interop.run(T, dir, argv);
        assertThat(r.exitCode()).as(r.toString()).isEqualTo(2);
        assertThat(r.output()).contains("allow entry '10.0.0.0/99'");
    }

    @Test
    void theConfigFileRequiresTlsWithoutFiles() throws Exception {
        Path conf = dir.resolve("jnbd.toml");
        Files.writeString(conf, "tls = \"require\"\n");
        refused(serve("--config", conf.toString()), "--tls require needs");
    }

    @Test
    void theConfigFileSetsTlsAndTheCommandLineWins() throws Exception {
        Interop.requireCommands("nbdinfo");
        Path keys = dir.resolve("keys.psk");
        TestPki.writePsk(keys, "alice");
        Path conf = dir.resolve("jnbd.toml");
        Files.writeString(conf, String.join("\n", "tls = \"require\"", "tls-psk = \"" + keys + "\"", "[export]", "m = \"memory:8M\"", ""));
        try (JnbdServer server = JnbdServer.start(dir.resolve("from-file"), "--config", conf.toString())) {
            Interop.run(T, dir, "nbdinfo", "--size", TlsFiles.pskUri(server.port(), "m", "alice", keys)).assertSuccess();
            assertThat(Interop.run(T, dir, "nbdinfo", "--size", server.uri("m")).exitCode()).as("plain text is refused").isNotZero();
        }
        try (JnbdServer server = JnbdServer.start(dir.resolve("overridden"), "--config", conf.toString(), "--tls", "off")) {
            Interop.run(T, dir, "nbdinfo", "--size", server.uri("m")).assertSuccess();
            assertThat(server.log()).contains("TLS is off (--tls off)");
        }
    }
}
