package io.jnbd.pool.memserver;

import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.ServerTls;
import java.io.IOException;
import java.net.SocketAddress;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A memory server (NMS): keeps pages for pool clients in its RAM, with a disk tier behind, and serves them
 * over NBD (docs/decisions/0005-memory-pool.md). Each client's unit is an export of its own
 * ({@link SpaceName}); {@code status} reports the server's state as JSON.
 *
 * <pre>{@code
 * try (MemServer m = MemServer.start(MemServer.Config.ofMemory(1L << 30), ServerConfig.defaults())) {
 *     m.listen(new InetSocketAddress("127.0.0.1", 10810));
 *     m.awaitStop();
 * }
 * }</pre>
 */
public final class MemServer implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(MemServer.class);
    /** The most clients one status report lists, so that it stays within the status export. */
    private static final int STATUS_CLIENTS = 200;

    /**
     * @param memory      bytes of the RAM tier
     * @param spillDir    directory of the spill file, or null for no disk tier
     * @param spillSize   bytes of the disk tier
     * @param clientQuota the most one client may store, 0 for no limit
     * @param grace       how long a client's data outlives its last connection
     */
    public record Config(long memory, Path spillDir, long spillSize, long clientQuota, Duration grace) {
        public static final Duration DEFAULT_GRACE = Duration.ofSeconds(30);

        public static Config ofMemory(long bytes) {
            return new Config(bytes, null, 0, 0, DEFAULT_GRACE);
        }

        public Config withGrace(Duration d) {
            return new Config(memory, spillDir, spillSize, clientQuota, d);
        }

        public Config withSpill(Path dir, long bytes) {
            return new Config(memory, dir, bytes, clientQuota, grace);
        }

        public Config withClientQuota(long bytes) {
            return new Config(memory, spillDir, spillSize, bytes, grace);
        }
    }

    private final long incarnation;
    private final long startNanos = System.nanoTime();
    private final PageStore store;
    private final SpaceRegistry registry;
    private final NbdServer server;
    private final ScheduledExecutorService timers;
    private final java.util.concurrent.CountDownLatch stopped = new java.util.concurrent.CountDownLatch(1);

    private MemServer(Config config, ServerConfig serverConfig, ServerTls tls, MemServerAccess access) throws IOException {
        long drawn;
        do drawn = new SecureRandom().nextLong(); while (drawn == 0 || drawn == -1);
        this.incarnation = drawn;
        this.store = new PageStore(config.memory(), config.spillDir(), config.spillSize(), config.clientQuota());
        this.timers = Executors.newSingleThreadScheduledExecutor(Thread.ofPlatform().name("jnbd-memserver").daemon().factory());
        this.registry = new SpaceRegistry(store, config.grace(), timers, () -> description().text(), this::status, access);
        this.server = new NbdServer(registry, serverConfig, tls);
        // The first rendering loads and links the JSON library (about a second on a busy two-core machine):
        // done here, it cannot make the first status poll of a pool client time out.
        status().toJson();
        // Likewise the first SHA-256 (fingerprints in every handshake's log line) loads the security providers.
        SpaceName.fingerprint(incarnation);
        log.info("memory server incarnation {}: {} bytes of RAM{}, grace {}s", Long.toHexString(incarnation), config.memory(),
            config.spillDir() == null ? "" : ", " + config.spillSize() + " bytes of spill in " + config.spillDir(),
            config.grace().toSeconds());
    }

    /** A memory server in plain text that shows its clients to anyone: for loopback and trusted networks. */
    public static MemServer start(Config config, ServerConfig serverConfig) throws IOException {
        return new MemServer(config, serverConfig, ServerTls.OFF, MemServerAccess.OPEN);
    }

    /** A memory server with TLS as {@code tls} says, admitting clients and showing them as {@code access} says. */
    public static MemServer start(Config config, ServerConfig serverConfig, ServerTls tls, MemServerAccess access) throws IOException {
        return new MemServer(config, serverConfig, tls, access);
    }

    public SocketAddress listen(SocketAddress address) throws IOException {
        return server.listen(address);
    }

    public long incarnation() {
        return incarnation;
    }

    public PageStore store() {
        return store;
    }

    public NbdServer nbdServer() {
        return server;
    }

    public ServerDescription description() {
        return new ServerDescription(incarnation, store.freeBytes(), store.ramBytes(), store.spillBytes());
    }

    public MemServerStatus status() {
        return status(true);
    }

    /** The status, listing each client only when {@code withClients}; otherwise they are only counted. */
    MemServerStatus status(boolean withClients) {
        var clients = withClients ? registry.clients(STATUS_CLIENTS) : List.<MemServerStatus.Client>of();
        return new MemServerStatus("jnbd memory server", Long.toHexString(incarnation),
            TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - startNanos), store.ramBytes(), store.ramUsedBytes(),
            store.spillBytes(), store.spillUsedBytes(), store.freeBytes(), clients,
            Math.max(0, registry.clientCount() - clients.size()));
    }

    /** Logs the store's state every {@code interval}, with the NBD server's throughput and latency. */
    public void reportStatsEvery(Duration interval) {
        server.reportStatsEvery(interval);
        timers.scheduleAtFixedRate(() -> log.info("memory: {} clients, RAM {}/{} MiB, spill {}/{} MiB, {} MiB free",
                registry.clientCount(), store.ramUsedBytes() >> 20, store.ramBytes() >> 20, store.spillUsedBytes() >> 20,
                store.spillBytes() >> 20, store.freeBytes() >> 20),
            interval.toMillis(), interval.toMillis(), TimeUnit.MILLISECONDS);
    }

    /** Blocks until {@link #stop} has finished: the RAM freed and the spill file gone. */
    public void awaitStop() throws InterruptedException {
        stopped.await();
    }

    /** True once {@link #stop} has run. */
    public boolean stopped() {
        return stopped.getCount() == 0;
    }

    public synchronized void stop(Duration grace) {
        if (stopped()) return;
        try {
            server.stop(grace);
            timers.shutdownNow();
            store.close();
        } finally {
            stopped.countDown();
        }
    }

    @Override
    public void close() {
        stop(Duration.ofSeconds(10));
    }
}
