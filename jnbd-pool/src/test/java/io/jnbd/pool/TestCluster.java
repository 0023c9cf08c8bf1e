package io.jnbd.pool;

import io.jnbd.pool.memserver.MemServer;
import io.jnbd.server.ServerConfig;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * Memory servers in this JVM, each behind a {@link FaultyProxy}, so that a test can kill, restart, hang, slow and
 * cut them while a pool uses them by the proxies' fixed addresses.
 */
final class TestCluster implements AutoCloseable {
    final List<MemServer> servers = new ArrayList<>();
    final List<FaultyProxy> proxies = new ArrayList<>();
    private final MemServer.Config config;

    TestCluster(int n, MemServer.Config config) throws IOException {
        this.config = config;
        for (int i = 0; i < n; i++) {
            MemServer m = start();
            servers.add(m);
            proxies.add(new FaultyProxy(address(m)));
        }
    }

    private MemServer start() throws IOException {
        MemServer m = MemServer.start(config, ServerConfig.defaults().withHandshakeTimeout(Duration.ofSeconds(5)));
        m.listen(new InetSocketAddress("127.0.0.1", 0));
        return m;
    }

    private static InetSocketAddress address(MemServer m) {
        return (InetSocketAddress) m.nbdServer().boundAddresses().getFirst();
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
    }
}
