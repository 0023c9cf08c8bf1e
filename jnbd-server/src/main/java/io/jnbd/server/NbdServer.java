package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.io.BufferPool;
import io.jnbd.server.io.InputBuffers;
import io.jnbd.server.net.Transport;
import io.jnbd.server.net.Transports;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * An NBD server: listeners on TCP and Unix sockets, a virtual thread per connection (and one for its
 * replies), a shared pool of I/O threads for backend calls, and one buffer pool for block data. See
 * docs/decisions/0006-virtual-thread-engine.md for why virtual threads rather than an event loop.
 *
 * <pre>{@code
 * var exports = new Exports(List.of(new Export("scratch", "", new MemoryBackend(1L << 30))), null);
 * try (var server = new NbdServer(exports, ServerConfig.defaults())) {
 *     server.listen(new InetSocketAddress("127.0.0.1", 10809));
 *     server.awaitStop();
 * }
 * }</pre>
 */
public final class NbdServer implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(NbdServer.class);

    private final ExportRegistry exports;
    private final ServerConfig config;
    private final ServerTls tls;
    private final BufferPool buffers;
    /** Receive buffers, lent to connections only while they have bytes to parse. */
    private final InputBuffers inputs = new InputBuffers(256 * 1024, 64);
    private final ExecutorService io;
    /**
     * A virtual thread per call for backends whose calls wait on other machines: a request waiting for a slow
     * or dead peer must not hold one of the I/O pool's threads, which every other export's disk work needs.
     */
    private final ExecutorService remote = Executors.newThreadPerTaskExecutor(Thread.ofVirtual().name("jnbd-remote-", 0).factory());
    private final ScheduledExecutorService timers;
    private final List<ServerSocketChannel> listeners = new ArrayList<>();
    private final List<Path> unixPaths = new ArrayList<>();
    private final Set<Connection> connections = ConcurrentHashMap.newKeySet();
    /** Connections holding a slot of {@link ServerConfig#maxConnections()} (refused ones do not). */
    private final java.util.concurrent.atomic.AtomicInteger admitted = new java.util.concurrent.atomic.AtomicInteger();
    /** Clients over the limit being told so in their handshake; more than {@link #MAX_REFUSING} are just closed. */
    private final java.util.concurrent.atomic.AtomicInteger refusing = new java.util.concurrent.atomic.AtomicInteger();
    private static final int MAX_REFUSING = 256;
    static final Handshake.Refusal SHUTTING_DOWN = new Handshake.Refusal(Nbd.REP_ERR_SHUTDOWN, "server is shutting down", true);
    private final AtomicLong connectionIds = new AtomicLong();
    private final ServerStats stats = new ServerStats();
    private volatile boolean stopping;
    private final Object stopLock = new Object();
    private boolean stopped;

    public NbdServer(ExportRegistry exports, ServerConfig config) {
        this(exports, config, ServerTls.OFF);
    }

    /** A server that offers TLS as {@code tls} says (see {@link ServerTls}). */
    public NbdServer(ExportRegistry exports, ServerConfig config, ServerTls tls) {
        this.exports = exports;
        exports.whenGone(name -> stats.forget(exports.shown(name)));
        this.config = config;
        this.tls = tls;
        this.buffers = new BufferPool(Math.max(config.bufferBudget(), 64L << 20), 64L << 20);
        boolean direct = exports.all().stream().anyMatch(e -> e.backend().has(Backend.Trait.DIRECT_IO));
        if (direct && BufferPool.hugePagesOff()) {
            log.warn("transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled is 'never'): "
                + "direct exports read and write through 4 KiB-page buffers, which some disks take at half the speed");
        }
        // Disk work only: replies leave through each connection's writer, so a stalled client cannot hold these.
        this.io = Executors.newFixedThreadPool(config.ioThreads(), Thread.ofPlatform().name("jnbd-io-", 0).daemon().factory());
        var timerPool = new java.util.concurrent.ScheduledThreadPoolExecutor(1, Thread.ofPlatform().name("jnbd-timer").daemon().factory());
        // A handshake timer is cancelled as soon as its client gets through: it must not hold on to the client
        // (and whatever it references) until it would have fired.
        timerPool.setRemoveOnCancelPolicy(true);
        this.timers = timerPool;
        long shortest = Math.min(config.sendTimeout().toMillis(), config.receiveTimeout().toMillis());
        long check = Math.max(50, Math.min(1000, shortest / 4));
        timers.scheduleAtFixedRate(() -> {
            dropStalledConnections();
            returnMemoryAfterBurst(System.nanoTime());
        }, check, check, TimeUnit.MILLISECONDS);
    }

    ExportRegistry exports() { return exports; }
    ServerConfig config() { return config; }
    ServerTls tls() { return tls; }
    BufferPool buffers() { return buffers; }
    InputBuffers inputBuffers() { return inputs; }

    /** Where calls of {@code backend} run: on virtual threads if it is {@link Backend.Trait#REMOTE}, else the I/O pool. */
    java.util.concurrent.Executor executorFor(Backend backend) {
        return backend.has(Backend.Trait.REMOTE) ? remote : io;
    }
    public ServerStats stats() { return stats; }
    boolean stopping() { return stopping; }

    /** True once {@link #stop} has begun. */
    public boolean isStopping() { return stopping; }

    /** Binds a TCP ({@link InetSocketAddress}) or Unix ({@link UnixDomainSocketAddress}) listener and starts accepting. */
    public SocketAddress listen(SocketAddress address) throws IOException {
        synchronized (stopLock) {
            if (stopping) throw new IOException("server is stopping");
        }
        ServerSocketChannel server;
        int backlog = config.backlog() > 0 ? config.backlog() : systemBacklog();
        if (address instanceof UnixDomainSocketAddress unix) {
            // A socket file left by a server that died is in the way; a live one would still answer.
            if (Files.exists(unix.getPath()) && !isLive(unix)) Files.delete(unix.getPath());
            server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
            server.bind(unix, backlog);
            unixPaths.add(unix.getPath());
        } else {
            server = ServerSocketChannel.open();
            server.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            server.bind(address, backlog);
        }
        synchronized (stopLock) {
            // stop() may have run while we were binding; it could not close what it did not see.
            if (stopping) {
                closeQuietly(server);
                throw new IOException("server is stopping");
            }
            listeners.add(server);
        }
        SocketAddress bound = server.getLocalAddress();
        Thread.ofPlatform().name("jnbd-accept-" + bound).start(() -> acceptLoop(server));
        log.info("listening on {} (backlog {})", describe(bound), backlog);
        return bound;
    }

    private static final Path SOMAXCONN = Path.of("/proc/sys/net/core/somaxconn");

    /**
     * The most connections the kernel queues for accept. A smaller queue overflows when many clients connect
     * at once (a diskless site booting): the kernel then drops their handshakes or answers with SYN cookies,
     * and those clients wait for retransmissions, up to half a minute.
     */
    static int systemBacklog() {
        try {
            // Not Files.readString: a sysctl file reports size 0, and that read stops after its first byte.
            return Math.max(128, Integer.parseInt(Files.readAllLines(SOMAXCONN).getFirst().strip()));
        } catch (IOException | RuntimeException e) {
            return 4096; // the kernel's default since Linux 5.4; it caps the value at its own limit anyway
        }
    }

    private static boolean isLive(UnixDomainSocketAddress unix) {
        try (SocketChannel probe = SocketChannel.open(unix)) {
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** Whether a peer's address is one of this host's own: its traffic then goes over loopback. */
    static boolean onThisHost(java.net.InetAddress address) {
        if (address.isLoopbackAddress() || address.isAnyLocalAddress()) return true;
        try {
            return java.net.NetworkInterface.getByInetAddress(address) != null;
        } catch (IOException e) {
            return false;
        }
    }

    public static String describe(SocketAddress a) {
        if (a instanceof InetSocketAddress inet) return inet.getHostString() + ":" + inet.getPort();
        return a.toString();
    }

    private void acceptLoop(ServerSocketChannel server) {
        while (!stopping) {
            SocketChannel ch;
            try {
                ch = server.accept();
            } catch (ClosedChannelException e) {
                return;
            } catch (IOException e) {
                if (stopping) return;
                log.warn("accept failed: {}", e.toString());
                try {
                    Thread.sleep(100); // e.g. out of file descriptors: do not spin
                } catch (InterruptedException ie) {
                    return;
                }
                continue;
            }
            SocketAddress remote = remoteAddress(ch);
            String peer = peerName(remote);
            Handshake.Refusal refusal = admit(ch, peer);
            if (refusal != null && refusing.incrementAndGet() > MAX_REFUSING) {
                refusing.decrementAndGet();
                stats.refusedInFlood();
                closeQuietly(ch); // a flood: telling each one why would cost more than it is worth
                continue;
            }
            if (refusal != null) stats.refusedAtLimit();
            try {
                // The send buffer is sized when the transmission phase starts, once TLS or not is known.
                if (remote instanceof InetSocketAddress) ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            } catch (IOException ignored) {
                // the options are optimisations only
            }
            Transport transport;
            try {
                transport = Transports.plain(ch);
            } catch (IOException e) {
                log.warn("{}: {}", peer, e.toString());
                closeQuietly(ch);
                releaseSlot(refusal == null);
                continue;
            }
            Connection c = new Connection(this, transport, peer,
                remote instanceof InetSocketAddress inet ? inet.getAddress() : null, refusal);
            connections.add(c);
            if (stopping) {
                c.abort();
                transport.close();
                connectionClosed(c);
                return;
            }
            c.handshakeTimer(timers.schedule(() -> {
                if (!c.inTransmission() && connections.contains(c)) {
                    if (c.admitted()) log.info("{}: handshake not finished within {}s, closing", peer, config.handshakeTimeout().toSeconds());
                    c.abort();
                }
            }, config.handshakeTimeout().toMillis(), TimeUnit.MILLISECONDS));
            Thread.ofVirtual().name("jnbd-conn-" + peer).start(c);
        }
    }

    /**
     * Takes a connection slot for a new client, or says why there is none. Beyond the limit a few slots are
     * kept for clients on this host (loopback or a Unix socket), so that an operator's nbdinfo still gets
     * through when remote clients have taken every slot.
     */
    private Handshake.Refusal admit(SocketChannel ch, String peer) {
        int limit = config.maxConnections();
        int n = admitted.incrementAndGet();
        if (n <= limit) return null;
        if (n <= limit + config.operatorSlots() && fromThisHost(ch)) {
            log.info("{}: admitted to a slot kept for local operators ({} connections, limit {})", peer, n, limit);
            return null;
        }
        admitted.decrementAndGet();
        if (n == limit + 1 || n % 1000 == 0) log.warn("{}: refused: already {} connections (--max-connections {})", peer, n - 1, limit);
        return new Handshake.Refusal(Nbd.REP_ERR_POLICY,
            "server has reached its limit of " + limit + " connections; try again later", false);
    }

    /** Gives back what a closed client held: a connection slot, or its place among those being refused. */
    private void releaseSlot(boolean wasAdmitted) {
        if (wasAdmitted) admitted.decrementAndGet();
        else refusing.decrementAndGet();
    }

    private static boolean fromThisHost(SocketChannel ch) {
        try {
            SocketAddress a = ch.getRemoteAddress();
            return !(a instanceof InetSocketAddress inet) || inet.getAddress().isLoopbackAddress();
        } catch (IOException e) {
            return false;
        }
    }

    /** The client's address, or null if the socket cannot tell (a Unix socket's client is unnamed anyway). */
    private static SocketAddress remoteAddress(SocketChannel ch) {
        try {
            return ch.getRemoteAddress();
        } catch (IOException e) {
            return null;
        }
    }

    private String peerName(SocketAddress remote) {
        long id = connectionIds.incrementAndGet();
        if (remote instanceof InetSocketAddress inet) return inet.getHostString() + ":" + inet.getPort();
        return "unix#" + id;
    }

    /**
     * Drops the clients that keep what they hold from everyone else: one that stopped reading its replies, one
     * that stopped sending in the middle of a request. Dropping gives back its buffers and its permits.
     */
    private void dropStalledConnections() {
        long now = System.nanoTime();
        for (Connection c : connections) {
            if (c.writerStalledNanos(now) > config.sendTimeout().toNanos()) {
                String why = "has not read its replies for " + seconds(config.sendTimeout());
                log.warn("{}: {}, closing", c.peer(), why);
                c.drop("dropped: " + why);
            } else if (c.receiveStalledNanos(now) > config.receiveTimeout().toNanos()) {
                String why = "sent part of a request, then nothing for " + seconds(config.receiveTimeout());
                log.warn("{}: {}, closing", c.peer(), why);
                c.drop("dropped: " + why);
            }
        }
    }

    private int connectionsPeak;
    private long lastTrim;

    /**
     * After a burst of clients has left (a diskless site's machines done booting), asks the collector to give
     * back the heap their connections took: the serial collector shrinks the heap only in a full collection, and
     * an idle server would not run one for hours, holding hundreds of MiB it no longer needs. At most once
     * every 10 s, and only when at least 500 connections and half of the peak have gone: a small live set
     * takes the collector a few milliseconds.
     */
    private void returnMemoryAfterBurst(long now) {
        int n = admitted.get();
        connectionsPeak = Math.max(connectionsPeak, n);
        if (connectionsPeak - n < 500 || n > connectionsPeak / 2 || now - lastTrim < TimeUnit.SECONDS.toNanos(10)) return;
        lastTrim = now;
        log.info("{} of {} connections have closed: returning their memory", connectionsPeak - n, connectionsPeak);
        connectionsPeak = n;
        System.gc();
    }

    private static String seconds(Duration d) {
        return d.toMillis() % 1000 == 0 ? d.toSeconds() + "s" : d.toMillis() / 1000.0 + "s";
    }

    void connectionClosed(Connection c) {
        if (connections.remove(c)) releaseSlot(c.admitted());
    }

    /** Logs throughput and the request state histograms every {@code interval}. */
    public void reportStatsEvery(Duration interval) {
        long ms = interval.toMillis();
        stats.report(1); // start the first interval now
        timers.scheduleAtFixedRate(() -> log.info("stats over {}s: {}", ms / 1000.0, stats.report(ms / 1000.0)),
            ms, ms, TimeUnit.MILLISECONDS);
    }

    /** Bytes of the buffer budget ({@link ServerConfig#bufferBudget()}) on loan right now. */
    public long bufferBytesInUse() {
        return buffers.outstandingBytes();
    }

    /** The most bytes of block data that may be on loan at once (see {@link ServerConfig#bufferBudget()}). */
    public long bufferBudgetBytes() {
        return buffers.budgetBytes();
    }

    /** Disk operations waiting for a thread of the I/O pool. */
    public int ioQueueLength() {
        return io instanceof java.util.concurrent.ThreadPoolExecutor pool ? pool.getQueue().size() : 0;
    }

    /** Threads of the I/O pool running a disk operation now. */
    public int ioThreadsBusy() {
        return io instanceof java.util.concurrent.ThreadPoolExecutor pool ? pool.getActiveCount() : 0;
    }

    /** The addresses the listeners are bound to, in the order they were opened. */
    public List<SocketAddress> boundAddresses() {
        List<SocketAddress> out = new ArrayList<>();
        synchronized (stopLock) {
            for (ServerSocketChannel l : listeners) {
                try {
                    out.add(l.getLocalAddress());
                } catch (IOException e) {
                    // closed meanwhile: no longer bound
                }
            }
        }
        return out;
    }

    /** Number of open connections holding a slot (in handshake or transmission); clients being refused are not counted. */
    public int connectionCount() {
        return admitted.get();
    }

    /** Receive buffers lent to connections right now (0 when every connection is idle). */
    public int inputBuffersInUse() {
        return inputs.inUse();
    }

    /**
     * Stops accepting, lets every connection finish the requests it has already read (waiting up to
     * {@code grace}), flushes and closes the exports. Idempotent.
     */
    public void stop(Duration grace) {
        List<ServerSocketChannel> toClose;
        synchronized (stopLock) {
            if (stopped) return;
            stopped = true;
            stopping = true;
            toClose = List.copyOf(listeners);
        }
        for (ServerSocketChannel s : toClose) closeQuietly(s);
        for (Path p : unixPaths) {
            try {
                Files.deleteIfExists(p);
            } catch (IOException ignored) {
                // best effort
            }
        }
        for (Connection c : connections) c.stopReading();
        long deadline = System.nanoTime() + grace.toNanos();
        while (!connections.isEmpty() && System.nanoTime() < deadline) {
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
        for (Connection c : connections) {
            log.warn("{}: still busy after {}s, closing", c.peer(), grace.toSeconds());
            c.abort();
        }
        for (Export e : exports.stop()) {
            try {
                e.backend().flush();
                e.backend().close();
            } catch (IOException ex) {
                log.error("export '{}': flush on shutdown failed: {}", e.name(), ex.toString());
            }
        }
        io.shutdown();
        remote.shutdown();
        timers.shutdownNow();
        synchronized (stopLock) {
            stopLock.notifyAll();
        }
        log.info("stopped");
    }

    /** Blocks until {@link #stop} has completed. */
    public void awaitStop() throws InterruptedException {
        synchronized (stopLock) {
            while (!stopped || !io.isShutdown()) stopLock.wait();
        }
    }

    @Override
    public void close() {
        stop(Duration.ofSeconds(30));
    }

    private static void closeQuietly(java.io.Closeable c) {
        try {
            c.close();
        } catch (IOException ignored) {
            // closing is best effort
        }
    }
}
