package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.tls.TestPki;
import io.jnbd.tls.TlsClientSettings;
import io.jnbd.tls.TlsServer;
import io.jnbd.tls.TlsServerSettings;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code cow-overlay=identity} through real TLS handshakes with PSK: each identity gets its own overlay by the export's
 * name alone, and a client asking for another's by name (or for its read-only view) is refused with
 * {@code NBD_REP_ERR_POLICY} and a message, and the refusal is logged.
 */
@Timeout(60)
class CowTlsIdentityTest {
    @TempDir
    Path dir;

    @Test
    void eachPskIdentityHasItsOwnOverlayAndNoneOpensAnothers() throws Exception {
        Path base = dir.resolve("base.img");
        byte[] baseBytes = ServerFixture.pattern(42, 2 << 20);
        Files.write(base, baseBytes);
        Path keys = dir.resolve("keys.psk");
        TestPki.writePsk(keys, "alice", "bob");
        Export boot = ExportSpec.parse("boot", "file:" + base + ",filter=cow,cow-overlay=identity,cow-dir=" + dir.resolve("cow")).openExport();
        NbdServer server = new NbdServer(new Exports(List.of(boot), null), ServerConfig.defaults(),
            new ServerTls(ServerTls.Mode.REQUIRE, TlsServer.load(new TlsServerSettings(null, keys, false))));
        PrintStream stderr = System.err;
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        try {
            SocketAddress address = server.listen(new InetSocketAddress("127.0.0.1", 0));
            TlsClientSettings alice = RealTls.psk(keys, "alice"), bob = RealTls.psk(keys, "bob");
            byte[] a = ServerFixture.pattern(1, 5000), b = ServerFixture.pattern(2, 5000);
            try (RawClient c = tls(address, alice)) {
                c.negotiateAfterGreeting("boot", false);
                assertThat(c.write(1000, a, Nbd.CMD_FLAG_FUA)).isZero();
            }
            try (RawClient c = tls(address, bob)) {
                c.negotiateAfterGreeting("boot", false);
                assertThat(c.read(1000, 5000)).as("bob's overlay does not hold alice's write")
                    .isEqualTo(Arrays.copyOfRange(baseBytes, 1000, 6000));
                assertThat(c.write(1000, b, Nbd.CMD_FLAG_FUA)).isZero();
            }

            System.setErr(new PrintStream(log, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err as it is
            for (String asked : List.of("boot/alice", "boot/alice@ro")) {
                try (RawClient c = tls(address, bob)) {
                    RawClient.OptionReply last = c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest(asked, List.of())).getLast();
                    assertThat(last.type()).as("bob's GO of %s", asked).isEqualTo(Nbd.REP_ERR_POLICY);
                    assertThat(last.string()).isEqualTo("overlay 'alice' is not this client's (its TLS identity is bob)");
                }
            }
            System.setErr(stderr);
            assertThat(log.toString(StandardCharsets.UTF_8))
                .contains("a client with TLS identities [bob] asked for overlay 'alice' of another: refused")
                .contains("asked for overlay 'alice@ro' of another: refused");

            try (RawClient c = tls(address, alice)) {
                c.negotiateAfterGreeting("boot/alice", false);
                assertThat(c.read(1000, 5000)).as("alice's overlay, by its name too").isEqualTo(a);
            }
            try (RawClient c = tls(address, alice)) {
                c.negotiateAfterGreeting("boot/alice@ro", false);
                assertThat(c.transmissionFlags & Nbd.FLAG_READ_ONLY).isNotZero();
                assertThat(c.read(1000, 5000)).as("alice's read-only view of her own overlay").isEqualTo(a);
            }
            try (RawClient c = tls(address, bob)) {
                c.negotiateAfterGreeting("boot", false);
                assertThat(c.read(1000, 5000)).isEqualTo(b);
            }
        } finally {
            System.setErr(stderr);
            server.stop(Duration.ofSeconds(5));
        }
        assertThat(dir.resolve("cow/clients/alice/map")).exists();
        assertThat(dir.resolve("cow/clients/bob/map")).exists();
        assertThat(Files.readAllBytes(base)).as("the base").isEqualTo(baseBytes);
    }

    private static RawClient tls(SocketAddress address, TlsClientSettings settings) throws IOException {
        RawClient c = RawClient.connect(address);
        try {
            c.greeting();
            c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
            RealTls.startTls(c, settings);
            return c;
        } catch (IOException | RuntimeException e) {
            c.close();
            throw e;
        }
    }
}
