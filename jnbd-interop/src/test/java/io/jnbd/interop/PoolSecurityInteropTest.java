package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowableOfType;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;
import io.jnbd.tls.TlsClientSettings;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Issue 37's measurement, as a new user would try it with stock tools, against a pool over plain-text memory
 * servers: (1) {@code nbdcopy nbd://MEMSERVER/status -} no longer gives the pool client's instance, only a
 * fingerprint; (2) {@code qemu-io} on a five-part space name with a guessed instance is refused; (3) names with
 * guessed instances under a later session, tried in a loop, are refused one by one, and the pool neither loses a
 * memory server nor reads anything but what it wrote. No log line holds a space's name with its instance.
 * Against memory servers under {@code --tls require --tls-psk}, with the pool's links under TLS: another PSK
 * identity cannot open the pool's spaces whatever name it gives, and sees the clients only if
 * {@code --status-clients} names it.
 */
@Timeout(180)
class PoolSecurityInteropTest {
    private static final long WRITTEN = 8L << 20;
    private static final int GUESSES = 1000;
    /** A space name with its instance in it, as nothing may show it. */
    private static final Pattern SPACE_WITH_INSTANCE = Pattern.compile("pool/[0-9]+/[0-9]+/[0-9a-f]{16}");

    @TempDir
    Path dir;
    PoolCluster cluster;

    @BeforeEach
    void requirements() {
        Interop.requireEnabled();
    }

    @AfterEach
    void tearDown() throws Exception {
        if (cluster != null) cluster.close();
    }

    @Test
    void theStatusHoldsNoInstanceAndGuessedNamesAreRefused() throws Exception {
        cluster = new PoolCluster(dir).start("64M");
        cluster.write(0x77, 0, WRITTEN);
        int port = cluster.memserver(0).port();
        String address = cluster.address(0);

        // 1. The status export, as nbdcopy reads it where it is installed.
        String status = Interop.which("nbdcopy") != null
            ? Interop.run(Duration.ofSeconds(30), dir, "nbdcopy", "nbd://" + address + "/status", "-").assertSuccess().output()
            : PoolCluster.document(port, "status");
        PoolCluster.MemView mem = cluster.memStatus(0);
        assertThat(mem.clients()).as(mem.json()).singleElement()
            .satisfies(c -> assertThat(c.instanceFingerprint()).matches("[0-9a-f]{6}"));
        long client = mem.clients().getFirst().client();
        assertThat(status).as("the status export").contains("\"client\" : " + client).doesNotContain("\"instance\"");
        assertThat(status.replace(mem.incarnation(), "")).as("the status export, its incarnation aside")
            .doesNotContainPattern("[0-9a-f]{16}");

        // 2. qemu-io on the five-part name with a guessed instance and the first session.
        Random r = new Random(37);
        if (Interop.which("qemu-io") != null) {
            String guess = "pool%2F" + client + "%2F0%2F" + HexFormat.of().toHexDigits(r.nextLong()) + "%2F1";
            Interop.Result read = Interop.run(Duration.ofSeconds(30), dir, "qemu-io", "-r", "-f", "raw",
                "nbd://" + address + "/" + guess, "-c", "read -P 0x77 0 1M");
            assertThat(read.exitCode()).as("qemu-io on a guessed name: %s", read.output()).isNotZero();
        }

        // 3. Guessed names in a loop, under the first and a later session: each refused by policy, the option only.
        int refused = 0;
        RawNbdClient c = null;
        for (int i = 0; i < GUESSES; i++) {
            if (i % 50 == 0) {
                if (c != null) c.close();
                c = RawNbdClient.connectOnly(port);
                c.greet();
            }
            String name = "pool/" + client + "/0/" + HexFormat.of().toHexDigits(r.nextLong()) + "/" + (i % 2 == 0 ? 1 : 9);
            RawNbdClient guesser = c;
            RawNbdClient.Refused no = catchThrowableOfType(RawNbdClient.Refused.class, () -> guesser.go(name));
            if (no != null && no.type == RawNbdClient.REP_ERR_POLICY) refused++;
        }
        c.close();
        assertThat(refused).as("guessed names refused with NBD_REP_ERR_POLICY").isEqualTo(GUESSES);
        mem = cluster.memStatus(0);
        assertThat(mem.clients()).as("clients after %d guesses: %s", GUESSES, mem.json()).hasSize(1);

        // The pool never lost the server, reads what it wrote and goes on writing.
        cluster.verify(0x77, 0, WRITTEN, "after the guesses");
        cluster.write(0x66, WRITTEN, WRITTEN);
        cluster.verify(0x66, WRITTEN, WRITTEN, "written after the guesses");
        assertThat(cluster.serve().log()).as("the pool's log").doesNotContain("memory server " + address + ": lost");
        assertThat(cluster.memserver(0).process().isAlive()).isTrue();
        for (String log : List.of(cluster.serve().log(), cluster.memserver(0).log(), cluster.memserver(1).log())) {
            assertThat(log).as("a log").doesNotContainPattern(SPACE_WITH_INSTANCE);
        }
        assertThat(cluster.memserver(0).log()).as("the memory server's log of the guesses").contains("in use by another pool client");
    }

    @Test
    void anotherIdentityCannotOpenTheSpacesOfAPoolOverTls() throws Exception {
        Path keys = dir.resolve("pool.psk");
        Random r = new Random(7);
        StringBuilder lines = new StringBuilder();
        for (String id : List.of("pool", "other", "ops")) {
            byte[] key = new byte[32];
            r.nextBytes(key);
            lines.append(id).append(':').append(HexFormat.of().formatHex(key)).append('\n');
        }
        Files.writeString(keys, lines);
        cluster = new PoolCluster(dir).withMemserverArgs("--tls", "require", "--tls-psk", keys.toString())
            .withStatusClients("ops").start("64M", "tls-psk-file=" + keys, "tls-username=pool");
        cluster.write(0x77, 0, WRITTEN);
        String address = cluster.address(0);
        int port = cluster.memserver(0).port();

        // The administrator identity sees the client, owned by the pool's identity; another identity only counts it.
        Interop.Result ops = Interop.run(Duration.ofSeconds(60), dir, Interop.jnbd().toString(), "pool", "status", "--json",
            "--tls-psk-file", keys.toString(), "--tls-username", "ops", address).assertSuccess();
        Map<String, Object> opsView = memServer(ops.output());
        List<?> clients = (List<?>) opsView.get("clients");
        assertThat(clients).as(ops.output()).hasSize(1);
        Map<?, ?> client = (Map<?, ?>) clients.getFirst();
        assertThat(client.get("owner")).as(ops.output()).isEqualTo("pool");
        long id = ((Number) client.get("client")).longValue();
        Interop.Result other = Interop.run(Duration.ofSeconds(60), dir, Interop.jnbd().toString(), "pool", "status", "--json",
            "--tls-psk-file", keys.toString(), "--tls-username", "other", address).assertSuccess();
        Map<String, Object> otherView = memServer(other.output());
        assertThat((List<?>) otherView.get("clients")).as(other.output()).isEmpty();
        assertThat(((Number) otherView.get("more_clients")).intValue()).as(other.output()).isEqualTo(1);
        Interop.Result plain = Interop.run(Duration.ofSeconds(60), dir, Interop.jnbd().toString(), "pool", "status", address);
        assertThat(plain.exitCode()).as("jnbd pool status without TLS: %s", plain.output()).isNotZero();

        // Identity 'other' names the pool's client id under the first and a later session: refused by policy.
        TlsClientSettings asOther = new TlsClientSettings(null, keys, "other", true, null);
        for (int session : List.of(1, 9)) {
            String name = "pool/" + id + "/0/" + HexFormat.of().toHexDigits(r.nextLong()) + "/" + session;
            assertThatThrownBy(() -> open(port, name, asOther)).as("identity 'other' opening %s", name)
                .hasMessageContaining("belongs to another identity");
        }
        assertThat(cluster.memserver(0).log()).as("the memory server's log")
            .contains("identities [other] asked for pool/" + id + "/0/~").contains("which belongs to identity 'pool': refused");

        // The owner's pool never noticed.
        cluster.verify(0x77, 0, WRITTEN, "after the other identity's attempts");
        cluster.write(0x66, WRITTEN, WRITTEN);
        cluster.verify(0x66, WRITTEN, WRITTEN, "written after the other identity's attempts");
        assertThat(cluster.serve().log()).as("the pool's log").doesNotContain("memory server " + address + ": lost")
            .doesNotContain("in plain text");
    }

    /** The one memory server's document of {@code jnbd pool status --json HOST:PORT}. */
    @SuppressWarnings("unchecked")
    private static Map<String, Object> memServer(String json) {
        // The JSON array is what starts a line with '['; log lines may come before it.
        var m = Pattern.compile("(?m)^\\[(\\s|$)").matcher(json);
        assertThat(m.find()).as("a JSON array in: %s", json).isTrue();
        List<?> docs = (List<?>) JsonDoc.parse(json.substring(m.start()));
        return (Map<String, Object>) docs.getFirst();
    }

    private static void open(int port, String name, TlsClientSettings tls) throws IOException {
        InetSocketAddress a = new InetSocketAddress("127.0.0.1", port);
        try (NbdClient c = NbdClient.connect(new NbdUri(URI.create("nbd://127.0.0.1:" + port + "/" + name), a, name),
                ClientOptions.defaults().withConnectTimeout(Duration.ofSeconds(10)).withTls(tls))) {
            c.size();
        }
    }
}
