package io.jnbd.pool.memserver;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdErrorException;
import io.jnbd.client.NbdUri;
import io.jnbd.protocol.Nbd;
import io.jnbd.server.ServerConfig;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A memory server as pool clients see it: a space per client and unit, sessions that a new instance of the
 * client replaces and a connected one keeps, data freed once a client has been gone for the grace, its
 * incarnation and free memory in the description, its state in the status export, ENOSPC when full, and bad
 * input closing only the connection that sent it.
 */
@Timeout(60)
class MemServerTest {
    MemServer server;
    InetSocketAddress address;

    void start(MemServer.Config config) throws IOException {
        start(config, ServerConfig.defaults().withHandshakeTimeout(Duration.ofSeconds(3)));
    }

    void start(MemServer.Config config, ServerConfig serverConfig) throws IOException {
        server = MemServer.start(config, serverConfig);
        address = (InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", 0));
    }

    @AfterEach
    void stop() {
        if (server != null) server.close();
    }

    NbdClient open(String export) throws IOException {
        return NbdClient.connect(new NbdUri(URI.create("nbd://127.0.0.1:" + address.getPort() + "/" + export), address, export),
            ClientOptions.defaults().withRequestTimeout(Duration.ofSeconds(10)));
    }

    static String space(int client, int unit, long instance) {
        return new SpaceName(client, unit, instance).exportName();
    }

    static ByteBuffer pattern(long seed, int n) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b);
        return ByteBuffer.wrap(b);
    }

    @Test
    void aPageHasTheSameOffsetInEverySpaceAndSpacesAreApart() throws Exception {
        start(MemServer.Config.ofMemory(64L << 20));
        try (NbdClient a = open(space(7, 0, 1)); NbdClient b = open(space(7, 1, 1)); NbdClient c = open(space(8, 0, 1))) {
            assertThat(a.size()).isEqualTo(SpaceName.SPACE_BYTES);
            long far = (1L << 40) + 4096; // a page index far beyond what RAM could hold if it were not sparse
            a.blocking().write(far, pattern(1, 8192), false);
            ByteBuffer got = ByteBuffer.allocate(8192);
            a.blocking().read(far, got);
            assertThat(got.array()).isEqualTo(pattern(1, 8192).array());
            for (NbdClient other : new NbdClient[] {b, c}) {
                ByteBuffer none = ByteBuffer.allocate(8192);
                other.blocking().read(far, none);
                assertThat(none.array()).as("another unit or client sees nothing of it").containsOnly(0);
            }
            assertThat(server.store().usedBytes(7)).isEqualTo(PageStore.PAGE);
        }
    }

    @Test
    void theDescriptionNamesTheIncarnationAndFreeMemory() throws Exception {
        start(MemServer.Config.ofMemory(64L << 20));
        try (NbdClient a = open(space(3, 0, 9))) {
            ServerDescription d = ServerDescription.parse(a.info().description());
            assertThat(d).isNotNull();
            assertThat(d.incarnation()).isEqualTo(server.incarnation());
            assertThat(d.free()).isEqualTo(64L << 20);
            a.blocking().write(0, pattern(2, 1 << 20), false);
        }
        try (NbdClient again = open(space(3, 0, 9))) {
            assertThat(ServerDescription.parse(again.info().description()).free()).isEqualTo((64L << 20) - (1 << 20));
        }
        MemServerStatus st = readStatus();
        assertThat(st.incarnation()).isEqualTo(Long.toHexString(server.incarnation()));
        assertThat(st.ramUsed()).isEqualTo(1 << 20);
        assertThat(st.clients()).singleElement().satisfies(c -> {
            assertThat(c.client()).isEqualTo(3);
            assertThat(c.bytes()).isEqualTo(1 << 20);
        });
    }

    @Test
    void aRestartedServerIsANewIncarnationAndEmpty() throws Exception {
        start(MemServer.Config.ofMemory(16L << 20));
        long first = server.incarnation();
        int port = address.getPort();
        try (NbdClient a = open(space(4, 0, 1))) {
            a.blocking().write(0, pattern(3, 4096), false);
        }
        server.close();
        server = MemServer.start(MemServer.Config.ofMemory(16L << 20), ServerConfig.defaults());
        address = (InetSocketAddress) server.listen(new InetSocketAddress("127.0.0.1", port));
        try (NbdClient a = open(space(4, 0, 1))) {
            assertThat(ServerDescription.parse(a.info().description()).incarnation()).isNotEqualTo(first);
            ByteBuffer got = ByteBuffer.allocate(4096);
            a.blocking().read(0, got);
            assertThat(got.array()).containsOnly(0);
        }
    }

    @Test
    void aClientsDataOutlivesItsConnectionsForTheGraceOnly() throws Exception {
        start(MemServer.Config.ofMemory(16L << 20).withGrace(Duration.ofSeconds(1)));
        try (NbdClient a = open(space(5, 0, 1))) {
            a.blocking().write(0, pattern(4, 65536), false);
        }
        // Back within the grace: everything is still there.
        try (NbdClient a = open(space(5, 0, 1))) {
            ByteBuffer got = ByteBuffer.allocate(65536);
            a.blocking().read(0, got);
            assertThat(got.array()).isEqualTo(pattern(4, 65536).array());
            Thread.sleep(1500); // longer than the grace, but connected: kept
            assertThat(server.store().usedBytes(5)).isEqualTo(65536);
        }
        awaitTrue(() -> server.store().usedBytes(5) == 0, "the client's data freed after the grace");
        assertThat(readStatus().clients()).isEmpty();
    }

    @Test
    void theStatisticsOfASessionGoWithItsLastConnection() throws Exception {
        start(MemServer.Config.ofMemory(16L << 20));
        try (var endpoint = io.jnbd.server.MetricsEndpoint.bind(new InetSocketAddress("127.0.0.1", 0))) {
            endpoint.expose(server.nbdServer());
            SpaceName space = new SpaceName(7, 0, 3);
            for (int session = 1; session <= 20; session++) {
                String name = space.withSession(session).exportName();
                try (NbdClient a = open(name); NbdClient b = open(name)) {
                    a.blocking().write(0, pattern(session, 4096), false);
                    b.blocking().write(4096, pattern(session, 4096), false);
                    // Series are named without the instance, the key to the space: by its fingerprint.
                    assertThat(scrape(endpoint.port())).as("session %d while connected", session)
                        .contains(space.withSession(session).shown()).doesNotContain("0000000000000003");
                }
            }
            // Each reconnection of a pool client is a new name: none of them may stay behind.
            awaitTrue(() -> !scrape(endpoint.port()).contains("pool/7/0/~"), "every session's series gone");
        }
    }

    private static String scrape(int port) throws Exception {
        try (var http = java.net.http.HttpClient.newHttpClient()) {
            return http.send(java.net.http.HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/metrics")).build(),
                java.net.http.HttpResponse.BodyHandlers.ofString()).body();
        }
    }

    @Test
    void aNewInstanceIsRefusedWhileTheOldOneIsConnectedOrWithinItsGrace() throws Exception {
        start(MemServer.Config.ofMemory(16L << 20).withGrace(Duration.ofSeconds(2)));
        try (NbdClient old = open(space(6, 0, 1))) {
            old.blocking().write(0, pattern(5, 65536), false);
            assertThatThrownBy(() -> open(space(6, 0, 2))).hasMessageContaining("refused by server policy")
                .hasMessageContaining("client 6 is in use by another pool client").hasMessageNotContaining("0000000000000001");
        }
        // Without TLS nothing tells a restarted pool client from one guessing at its name: the old instance's
        // data stays its own for the grace, and only then may another instance take the client id.
        awaitTrue(() -> readStatus().clients().stream().allMatch(c -> c.connections() == 0), "the old instance's connection counted out");
        assertThatThrownBy(() -> open(space(6, 0, 2))).hasMessageContaining("client 6 is in use by another pool client");
        try (NbdClient back = open(space(6, 0, 1))) {
            ByteBuffer got = ByteBuffer.allocate(65536);
            back.blocking().read(0, got);
            assertThat(got.array()).as("the old instance's data after the refused newcomer").isEqualTo(pattern(5, 65536).array());
        }
        awaitTrue(() -> server.store().usedBytes(6) == 0 && readStatus().clients().isEmpty(), "the old instance freed after its grace");
        try (NbdClient fresh = open(space(6, 0, 2))) {
            ByteBuffer got = ByteBuffer.allocate(65536);
            fresh.blocking().read(0, got);
            assertThat(got.array()).containsOnly(0);
        }
    }

    @Test
    void aNewerSessionFencesOffTheWritesOfAnOlderOneWhichCannotComeBack() throws Exception {
        start(MemServer.Config.ofMemory(64L << 20));
        SpaceName space = new SpaceName(9, 0, 5);
        try (NbdClient old = open(space.withSession(1).exportName())) {
            old.blocking().write(0, pattern(1, 4096), false);
            try (NbdClient fresh = open(space.withSession(2).exportName())) {
                // The old session's connection is still open (a server that hung and resumed reads what was
                // queued on it): its writes and trims must not land once the client has come back.
                assertThatThrownBy(() -> old.blocking().write(4096, pattern(2, 4096), false))
                    .isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.ESHUTDOWN));
                assertThatThrownBy(() -> old.blocking().trim(0, 4096, false))
                    .isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.ESHUTDOWN));
                ByteBuffer got = ByteBuffer.allocate(8192);
                fresh.blocking().read(0, got);
                byte[] expected = new byte[8192];
                System.arraycopy(pattern(1, 4096).array(), 0, expected, 0, 4096);
                assertThat(got.array()).as("the old session's data up to the new session, nothing after").isEqualTo(expected);
                fresh.blocking().write(4096, pattern(3, 4096), false);
                assertThatThrownBy(() -> open(space.withSession(1).exportName())).hasMessageContaining("superseded by session 2");
            }
        }
    }

    @Test
    void aFullServerAnswersEnospcAndKeepsWhatItHas() throws Exception {
        start(MemServer.Config.ofMemory(1L << 20));
        try (NbdClient a = open(space(9, 0, 1))) {
            a.blocking().write(0, pattern(6, 1 << 20), false);
            assertThatThrownBy(() -> a.blocking().write(1 << 20, pattern(7, 65536), false))
                .isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.ENOSPC));
            ByteBuffer got = ByteBuffer.allocate(1 << 20);
            a.blocking().read(0, got);
            assertThat(got.array()).isEqualTo(pattern(6, 1 << 20).array());
            a.blocking().trim(0, 1 << 20, false);
            a.blocking().write(1 << 20, pattern(7, 65536), false);
        }
    }

    @Test
    void badNamesGarbageAndHugeClaimsCloseOnlyTheirConnection() throws Exception {
        // A client that agreed no block sizes may write a gigabyte in one request (the NBD spec), so a claim that
        // large is read as it comes; one that stops coming is dropped at the receive timeout.
        start(MemServer.Config.ofMemory(16L << 20), ServerConfig.defaults().withHandshakeTimeout(Duration.ofSeconds(3))
            .withReceiveTimeout(Duration.ofSeconds(2)));
        try (NbdClient good = open(space(11, 0, 1))) {
            good.blocking().write(0, pattern(8, 4096), false);
            for (String bad : new String[] {"pool/0/0/0000000000000001", "pool/70000/0/0000000000000001", "pool/1/0/xyz",
                    "pool/1/0", "pool/1/0/0000000000000001/extra", "other"}) {
                assertThatThrownBy(() -> open(bad)).as(bad).hasMessageContaining("unknown export");
            }
            // Garbage instead of the client's handshake.
            try (SocketChannel raw = SocketChannel.open(address)) {
                raw.write(ByteBuffer.wrap("garbage, not NBD at all, and then some more of it".getBytes()));
                assertThat(closedByServer(raw)).as("the server hangs up on garbage").isTrue();
            }
            // A proper handshake to a space, then a WRITE claiming a gigabyte with a little of it sent.
            try (SocketChannel raw = SocketChannel.open(address)) {
                handshake(raw, space(12, 0, 1));
                ByteBuffer req = ByteBuffer.allocate(Nbd.REQUEST_SIZE + 4096);
                req.putInt(Nbd.REQUEST_MAGIC).putShort((short) 0).putShort((short) Nbd.CMD_WRITE).putLong(1).putLong(0)
                    .putInt(1 << 30).put(new byte[4096]).flip();
                while (req.hasRemaining()) raw.write(req);
                assertThat(closedByServer(raw)).as("the server hangs up on a payload that stops coming").isTrue();
            }
            ByteBuffer got = ByteBuffer.allocate(4096);
            good.blocking().read(0, got);
            assertThat(got.array()).isEqualTo(pattern(8, 4096).array());
        }
    }

    /** True once the server closes the connection (EOF or reset); whatever it sends first is read and ignored. */
    private static boolean closedByServer(SocketChannel raw) throws IOException {
        raw.socket().setSoTimeout(10_000);
        var in = raw.socket().getInputStream();
        byte[] sink = new byte[4096];
        try {
            while (in.read(sink) >= 0) { /* the greeting, error replies */ }
            return true;
        } catch (java.net.SocketException e) {
            return true; // reset: closed with our bytes unread
        } catch (java.net.SocketTimeoutException e) {
            return false;
        }
    }

    /** The fixed newstyle handshake up to transmission on {@code export}, by hand. */
    private static void handshake(SocketChannel raw, String export) throws IOException {
        raw.socket().setSoTimeout(10_000);
        var in = new java.io.DataInputStream(raw.socket().getInputStream());
        in.readLong();
        in.readLong();
        in.readUnsignedShort();
        byte[] name = export.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        ByteBuffer out = ByteBuffer.allocate(4 + 16 + 4 + name.length + 2);
        out.putInt(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES).putLong(Nbd.IHAVEOPT).putInt(Nbd.OPT_GO)
            .putInt(4 + name.length + 2).putInt(name.length).put(name).putShort((short) 0).flip();
        while (out.hasRemaining()) raw.write(out);
        while (true) {
            in.readLong();
            in.readInt();
            int type = in.readInt();
            in.readFully(new byte[in.readInt()]);
            if (type == Nbd.REP_ACK) return;
            if (type < 0) throw new IOException("GO refused: " + type);
        }
    }

    private MemServerStatus readStatus() throws IOException {
        try (NbdClient s = open("status")) {
            ByteBuffer buf = ByteBuffer.allocate((int) s.size());
            s.blocking().read(0, buf);
            return MemServerStatus.parse(buf.array());
        }
    }

    private static void awaitTrue(java.util.concurrent.Callable<Boolean> condition, String what) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!condition.call() && System.nanoTime() < deadline) Thread.sleep(50);
        assertThat(condition.call()).as(what).isTrue();
    }
}
