package io.jnbd.pool;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;
import io.jnbd.pool.memserver.MemServer;
import io.jnbd.pool.memserver.MemServerAccess;
import io.jnbd.pool.memserver.MemServerStatus;
import io.jnbd.pool.memserver.SpaceName;
import io.jnbd.protocol.Nbd;
import io.jnbd.server.AllowList;
import io.jnbd.tls.TlsClientSettings;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Issue 37's attack, step by step, against the pool's memory servers: (1) read the status export for the pool
 * client's id and instance, (2) open the client's space by its five-part name and read its data, (3) open it under
 * a later session number to write into it and fence the pool off. In plain text the instance is never shown, so
 * that names have to be guessed, and every guess is refused without leaving anything behind. Under TLS a space
 * belongs to the identity that made it: another identity that knows its name still cannot read, write or fence it.
 */
@Timeout(120)
class PoolSecurityTest {
    private static final int MiB = 1 << 20;
    private static final int GUESSES = 2000;

    private static PoolConfig config(TestCluster c) throws IOException {
        return new PoolConfig(c.addresses(), 8L * MiB, 2, 256 << 10, 0, 0, Duration.ofSeconds(2), 0, 2, 0, 0).withTls(c.clientTls());
    }

    @Test
    void plainTextServersNeverShowTheInstanceAndRefuseGuessedNames() throws Exception {
        try (TestCluster c = new TestCluster(2, MemServer.Config.ofMemory(64L * MiB));
             PoolVolume v = PoolVolume.open(config(c))) {
            byte[] sevens = new byte[MiB];
            Arrays.fill(sevens, (byte) 0x77);
            v.write(0, ByteBuffer.wrap(sevens)).join();
            SpaceName space = v.space();
            String instance = HexFormat.of().toHexDigits(space.instance());
            Map<MemServerLink, Integer> generations = generations(v);

            // 1. The status export: the client is listed, by its fingerprint, never by its instance.
            for (String address : c.addresses()) {
                byte[] doc = read(address, "status", null);
                assertThat(new String(doc, StandardCharsets.UTF_8)).as("status of %s", address).doesNotContain(instance);
                MemServerStatus st = MemServerStatus.parse(doc);
                assertThat(st.clients()).singleElement().satisfies(cl -> {
                    assertThat(cl.client()).isEqualTo(space.client());
                    assertThat(cl.instanceFingerprint()).isEqualTo(SpaceName.fingerprint(space.instance()));
                    assertThat(cl.owner()).isNull();
                });
                try (RawOptions o = new RawOptions(inet(address))) {
                    assertThat(o.list()).as("NBD_OPT_LIST of %s", address).singleElement().asString().startsWith("status")
                        .doesNotContain(instance);
                }
            }
            assertThat(new String(v.status().toJson(), StandardCharsets.UTF_8)).as("the pool's status").doesNotContain(instance);

            // 2 and 3. Names with guessed instances, under the current and a later session: each refused, none
            // counted as a client, none fencing the pool off.
            Random r = new Random(37);
            String address = c.addresses().getFirst();
            int refused = 0;
            // In batches: a connection has the server's handshake timeout to send its options, then it is closed.
            for (int batch = 0; batch < GUESSES / 50; batch++) {
                try (RawOptions o = new RawOptions(inet(address))) {
                    for (int i = 0; i < 50; i++) {
                        long guess = r.nextLong();
                        if (guess == space.instance()) continue;
                        SpaceName name = new SpaceName(space.client(), space.unit(), guess, i % 2 == 0 ? 1 : 9);
                        if (o.go(name.exportName()) == Nbd.REP_ERR_POLICY) refused++;
                    }
                }
            }
            assertThat(refused).as("guessed names refused with NBD_REP_ERR_POLICY").isEqualTo(GUESSES);
            for (MemServer m : c.servers) {
                assertThat(m.status().clients()).as("clients after %d guesses", GUESSES).hasSize(1);
            }
            assertThat(generations(v)).as("the links' sessions after the guesses: none fenced off").isEqualTo(generations);
            ByteBuffer back = ByteBuffer.allocate(MiB);
            v.read(0, back).join();
            assertThat(back.array()).as("the pool's data after the guesses").isEqualTo(sevens);
        }
    }

    @Test
    void anotherIdentityCannotReadWriteOrFenceASpaceAndTheOwnerWorksOn() throws Exception {
        try (TestCluster c = TestCluster.overPsk(2, MemServer.Config.ofMemory(64L * MiB), MemServerAccess.DEFAULT)) {
            PoolConfig config = config(c);
            byte[] sevens = new byte[MiB];
            Arrays.fill(sevens, (byte) 0x77);
            SpaceName space;
            try (PoolVolume v = PoolVolume.open(config)) {
                v.write(0, ByteBuffer.wrap(sevens)).join();
                space = v.space();
                Map<MemServerLink, Integer> generations = generations(v);
                TlsClientSettings other = c.as(TestCluster.OTHER_IDENTITY);
                for (String address : c.addresses()) {
                    int current = generations.values().iterator().next();
                    for (int session : List.of(current, current + 7)) {
                        String name = space.withSession(session).exportName();
                        assertThatThrownBy(() -> read(address, name, other)).as("identity 'other' opening %s", name)
                            .hasMessageContaining("refused by server policy").hasMessageContaining("belongs to another identity");
                    }
                    // Without TLS nothing is answered but the demand for it; with the pool's name and a wrong key,
                    // the TLS handshake fails.
                    assertThatThrownBy(() -> read(address, space.exportName(), null)).as("a plain client").isInstanceOf(IOException.class);
                    TlsClientSettings wrongKey = new TlsClientSettings(null, c.wrongKeyFile(), TestCluster.POOL_IDENTITY, true, null);
                    assertThatThrownBy(() -> read(address, space.exportName(), wrongKey)).as("a wrong key").isInstanceOf(IOException.class);
                    // The other identity sees the clients (it is authenticated) and whose they are, not their keys.
                    MemServerStatus st = MemServerStatus.parse(read(address, "status", other));
                    assertThat(st.clients()).singleElement().satisfies(cl -> assertThat(cl.owner()).isEqualTo(TestCluster.POOL_IDENTITY));
                }
                assertThat(generations(v)).as("the links' sessions after the other identity's attempts").isEqualTo(generations);
                ByteBuffer back = ByteBuffer.allocate(MiB);
                v.read(0, back).join();
                assertThat(back.array()).as("the owner's data").isEqualTo(sevens);
                byte[] fives = new byte[MiB];
                Arrays.fill(fives, (byte) 0x55);
                v.write(MiB, ByteBuffer.wrap(fives)).join();
                v.read(MiB, back.clear()).join();
                assertThat(back.array()).as("what the owner wrote after the attempts").isEqualTo(fives);
            }
            // The owner restarted (a new instance, the same client id): its identity takes the id over at once.
            try (PoolVolume again = PoolVolume.open(config.withClient(space.client()))) {
                assertThat(again.status().servers()).allSatisfy(s -> assertThat(s.state()).isEqualTo("up"));
                assertThat(again.space().instance()).isNotEqualTo(space.instance());
            }
        }
    }

    @Test
    void onlyTheAllowedConnectAndOnlyTheAdministratorSeesTheClients() throws Exception {
        MemServerAccess access = new MemServerAccess(AllowList.parse(List.of(TestCluster.POOL_IDENTITY + ";ops")),
            MemServerAccess.StatusClients.parse("ops"));
        try (TestCluster c = TestCluster.overPsk(1, MemServer.Config.ofMemory(16L * MiB), access);
             PoolVolume v = PoolVolume.open(new PoolConfig(c.addresses(), 4L * MiB, 1, 256 << 10, 0, 0, c.serverTimeout(), 0, 1, 0, 0)
                 .withTls(c.clientTls()))) {
            v.write(0, ByteBuffer.wrap(new byte[65536])).join();
            String address = c.addresses().getFirst();
            assertThatThrownBy(() -> read(address, "status", c.as(TestCluster.OTHER_IDENTITY))).as("an identity off --allow")
                .hasMessageContaining("not admitted");
            MemServerStatus pool = MemServerStatus.parse(read(address, "status", c.clientTls()));
            assertThat(pool.clients()).as("the clients as the pool sees them").isEmpty();
            assertThat(pool.moreClients()).isEqualTo(1);
            assertThat(pool.free()).as("what the pool needs of the status").isPositive();
        }
    }

    @Test
    void thePoolSpecTakesLibnbdsTlsKeys(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
        java.nio.file.Path psk = java.nio.file.Files.writeString(dir.resolve("k.psk"), "pool:" + "ab".repeat(32) + "\n");
        var options = new io.jnbd.server.backend.BackendOptions(Map.of("size", "1G", "tls-psk-file", psk.toString(), "tls-username", "pool"));
        TlsClientSettings tls = PoolBackendFactory.config("127.0.0.1:1,127.0.0.1:2", options).tls();
        assertThat(tls.pskFile()).isEqualTo(psk);
        assertThat(tls.pskIdentity()).isEqualTo("pool");
        assertThat(tls.verifyPeer()).isTrue();
        assertThat(PoolBackendFactory.config("127.0.0.1:1", new io.jnbd.server.backend.BackendOptions(Map.of("size", "1G"))).tls())
            .as("no tls- key: plain text").isNull();
        for (Map<String, String> wrong : List.of(Map.of("size", "1G", "tls-username", "pool"),
                Map.of("size", "1G", "tls-psk-file", dir.resolve("missing").toString()),
                Map.of("size", "1G", "tls-psk-file", psk.toString(), "tls-certificates", dir.toString()),
                Map.of("size", "1G", "tls-certificates", dir.toString(), "tls-username", "pool"))) {
            assertThatThrownBy(() -> PoolBackendFactory.config("127.0.0.1:1", new io.jnbd.server.backend.BackendOptions(wrong)))
                .as("%s", wrong).isInstanceOf(IllegalArgumentException.class);
        }
    }

    /**
     * {@code jnbd serve} opens its pool exports at start: one whose memory servers are on another host in plain
     * text gets a warning; loopback or TLS links do not. 192.0.2.1 (TEST-NET-1) answers nobody, so each open
     * fails after the warning is or is not logged.
     */
    @Test
    void aPoolOfRemoteMemoryServersInPlainTextIsWarnedAbout(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
        java.nio.file.Path psk = java.nio.file.Files.writeString(dir.resolve("k.psk"), "pool:" + "ab".repeat(32) + "\n");
        Map<String, String> remotePlain = Map.of("size", "1G", "server-timeout", "1");
        Map<String, String> remoteTls = Map.of("size", "1G", "server-timeout", "1", "tls-psk-file", psk.toString());
        assertThat(logOfOpening("192.0.2.1:10810", remotePlain)).contains("in plain text").contains("192.0.2.1:10810");
        assertThat(logOfOpening("127.0.0.1:1", remotePlain)).doesNotContain("in plain text");
        assertThat(logOfOpening("192.0.2.1:10810", remoteTls)).doesNotContain("in plain text");
    }

    /** What is logged while the pool export {@code target} is opened (and fails: no memory server answers). */
    private static String logOfOpening(String target, Map<String, String> options) {
        java.io.ByteArrayOutputStream log = new java.io.ByteArrayOutputStream();
        java.io.PrintStream stderr = System.err;
        System.setErr(new java.io.PrintStream(log, true, StandardCharsets.UTF_8));
        try {
            assertThatThrownBy(() -> new PoolBackendFactory().open(target, new io.jnbd.server.backend.BackendOptions(options), false))
                .isInstanceOf(IOException.class).hasMessageContaining("no memory server answered");
        } finally {
            System.setErr(stderr);
        }
        String text = log.toString(StandardCharsets.UTF_8);
        stderr.print(text);
        return text;
    }

    private static Map<MemServerLink, Integer> generations(PoolVolume v) {
        Map<MemServerLink, Integer> out = new HashMap<>();
        for (MemServerLink l : v.links()) out.put(l, l.session() == null ? -1 : l.session().generation());
        return out;
    }

    private static InetSocketAddress inet(String hostPort) {
        int colon = hostPort.lastIndexOf(':');
        return new InetSocketAddress(hostPort.substring(0, colon), Integer.parseInt(hostPort.substring(colon + 1)));
    }

    /** The first 64 KiB of export {@code name}, over TLS as {@code tls} says (null: plain text). */
    private static byte[] read(String address, String name, TlsClientSettings tls) throws IOException {
        InetSocketAddress a = inet(address);
        NbdUri uri = new NbdUri(java.net.URI.create("nbd://" + address + "/" + name), a, name);
        try (NbdClient client = NbdClient.connect(uri, ClientOptions.defaults().withConnectTimeout(Duration.ofSeconds(5))
                .withRequestTimeout(Duration.ofSeconds(5)).withTls(tls))) {
            ByteBuffer buf = ByteBuffer.allocate((int) Math.min(client.size(), 64 * 1024));
            client.blocking().read(0, buf);
            return buf.array();
        }
    }
}
