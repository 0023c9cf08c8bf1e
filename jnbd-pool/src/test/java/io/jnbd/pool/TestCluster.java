package io.jnbd.pool;

import io.jnbd.pool.memserver.MemServer;
import io.jnbd.pool.memserver.MemServerAccess;
import io.jnbd.server.FaultyProxy;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.ServerTls;
import io.jnbd.tls.TlsClientSettings;
import io.jnbd.tls.TlsConfigException;
import io.jnbd.tls.TlsServer;
import io.jnbd.tls.TlsServerSettings;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;

/**
 * Memory servers in this JVM, each behind a {@link FaultyProxy}, so that a test can kill, restart, hang, slow and
 * cut them while a pool uses them by the proxies' fixed addresses. In plain text, or under required TLS with
 * pre-shared keys ({@link #overPsk}): the pool's identity is {@value #POOL_IDENTITY}, and another one,
 * {@value #OTHER_IDENTITY}, is known to the servers too.
 */
final class TestCluster implements AutoCloseable {
    static final String POOL_IDENTITY = "pool";
    static final String OTHER_IDENTITY = "other";

    final List<MemServer> servers = new ArrayList<>();
    final List<FaultyProxy> proxies = new ArrayList<>();
    private final MemServer.Config config;
    private final ServerTls tls;
    private final MemServerAccess access;
    /** The PSK file's directory; null in plain text. */
    private final Path keys;

    TestCluster(int n, MemServer.Config config) throws IOException {
        this(n, config, null, MemServerAccess.OPEN);
    }

    /** {@code n} servers requiring TLS with pre-shared keys, each space owned by the identity that made it. */
    static TestCluster overPsk(int n, MemServer.Config config, MemServerAccess access) throws IOException {
        Path dir = Files.createTempDirectory("jnbd-pool-psk");
        Random r = new Random(n);
        StringBuilder lines = new StringBuilder();
        for (String id : List.of(POOL_IDENTITY, OTHER_IDENTITY)) {
            byte[] key = new byte[32];
            r.nextBytes(key);
            lines.append(id).append(':').append(HexFormat.of().formatHex(key)).append('\n');
        }
        Files.writeString(dir.resolve("keys.psk"), lines);
        return new TestCluster(n, config, dir, access);
    }

    private TestCluster(int n, MemServer.Config config, Path keys, MemServerAccess access) throws IOException {
        this.config = config;
        this.keys = keys;
        this.access = access;
        try {
            this.tls = keys == null ? ServerTls.OFF
                : new ServerTls(ServerTls.Mode.REQUIRE, TlsServer.load(new TlsServerSettings(null, keys.resolve("keys.psk"), false)));
        } catch (TlsConfigException e) {
            throw new IOException(e);
        }
        for (int i = 0; i < n; i++) {
            MemServer m = start();
            servers.add(m);
            proxies.add(new FaultyProxy(address(m)));
        }
    }

    private MemServer start() throws IOException {
        MemServer m = MemServer.start(config, ServerConfig.defaults().withHandshakeTimeout(Duration.ofSeconds(5)), tls, access);
        m.listen(new InetSocketAddress("127.0.0.1", 0));
        return m;
    }

    private static InetSocketAddress address(MemServer m) {
        return (InetSocketAddress) m.nbdServer().boundAddresses().getFirst();
    }

    /**
     * The server timeout a pool over these servers should use: a second in plain text; five under TLS, whose
     * handshakes (the first in a JVM loads the TLS engine) and encryption take longer on a busy test machine.
     */
    Duration serverTimeout() {
        return Duration.ofSeconds(keys == null ? 1 : 5);
    }

    /** The TLS of the pool's links (identity {@value #POOL_IDENTITY}); null in plain text. */
    TlsClientSettings clientTls() {
        return as(POOL_IDENTITY);
    }

    /** The TLS a client of identity {@code id} connects with; null in plain text. */
    TlsClientSettings as(String id) {
        return keys == null ? null : new TlsClientSettings(null, keys.resolve("keys.psk"), id, true, null);
    }

    /** A PSK file naming the pool's identity with a key the servers do not know; null in plain text. */
    Path wrongKeyFile() throws IOException {
        if (keys == null) return null;
        Path f = keys.resolve("wrong.psk");
        Files.writeString(f, POOL_IDENTITY + ":" + "00".repeat(32) + "\n");
        return f;
    }

    List<String> addresses() throws IOException {
        List<String> out = new ArrayList<>();
        for (FaultyProxy p : proxies) out.add(p.address());
        return out;
    }

    /** The server dies: its connections reset, its address refuses. Its data is gone. */
    void kill(int i) {
        proxies.get(i).refuse(true);
        servers.get(i).stop(Duration.ZERO);
        proxies.get(i).cut();
    }

    boolean killed(int i) {
        return servers.get(i).stopped();
    }

    /** A new server at the same address: a new incarnation, empty. */
    void restart(int i) throws IOException {
        MemServer m = start();
        servers.set(i, m);
        proxies.get(i).retarget(address(m));
        proxies.get(i).refuse(false);
    }

    void hang(int i, boolean on) {
        proxies.get(i).hang(on);
    }

    void slow(int i, Duration perChunk) {
        proxies.get(i).delay(perChunk);
    }

    /** Bytes all servers have sent to their clients so far. */
    long bytesToClients() {
        return proxies.stream().mapToLong(FaultyProxy::bytesToClients).sum();
    }

    void cut(int i) {
        proxies.get(i).cut();
    }

    @Override
    public void close() {
        for (FaultyProxy p : proxies) p.close();
        for (MemServer m : servers) m.stop(Duration.ZERO);
        if (keys != null) {
            try (var files = Files.list(keys)) {
                for (Path f : files.toList()) Files.deleteIfExists(f);
                Files.deleteIfExists(keys);
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
    }
}
