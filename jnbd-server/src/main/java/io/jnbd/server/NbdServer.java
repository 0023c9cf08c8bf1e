package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.io.BufferPool;
import io.jnbd.server.io.InputBuffers;
import io.jnbd.server.net.Listener;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ClosedChannelException;
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
    private final List<Listener> listeners = new ArrayList<>();
    /** One per listener; the socket is released only when its thread has left accept (see {@link #stop}). */
    private final List<Thread> acceptors = new ArrayList<>();
    private final Set<Connection> connections = ConcurrentHashMap.newKeySet();
    private final Admission admission;
    static final Handshake.Refusal SHUTTING_DOWN = new Handshake.Refusal(Nbd.REP_ERR_SHUTDOWN, "server is shutting down", true);
    private final AtomicLong connectionIds = new AtomicLong();
    private final ServerStats stats = new ServerStats();
    private volatile boolean stopping;
    private final Drain drain = new Drain();
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
        this.admission = new Admission(config, stats);
        ConnectionWatchdog watchdog = new ConnectionWatchdog(config, connections, admission::admitted);
        long check = watchdog.periodMillis();
        timers.scheduleAtFixedRate(watchdog::check, check, check, TimeUnit.MILLISECONDS);
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
    Drain drain() { return drain; }

    /** True once {@link #stop} has begun. */
    public boolean isStopping() { return stopping; }

    /** Binds a TCP ({@link InetSocketAddress}) or Unix ({@link UnixDomainSocketAddress}) listener and starts accepting. */
    public SocketAddress listen(SocketAddress address) throws IOException {
        synchronized (stopLock) {
            if (stopping) throw new IOException("server is stopping");
        }
        return serve(Listener.bind(address, config.backlog()));
    }

    /**
     * Starts accepting on a listener bound elsewhere (see {@link io.jnbd.server.net.SocketActivation}); the server
     * owns it from now on, and closes it even if it is stopping already.
     */
    public SocketAddress serve(Listener listener) throws IOException {
        synchronized (stopLock) {
            // stop() may have run while we were binding; it could not close what it did not see.
            if (stopping) {
                listener.close();
                throw new IOException("server is stopping");
            }
            listeners.add(listener);
        }
        SocketAddress bound = listener.address();
        Thread acceptor = Thread.ofPlatform().name("jnbd-accept-" + bound).unstarted(() -> acceptLoop(listener));
        synchronized (stopLock) {
            // Started under the lock: stop() joins every thread it finds listed, and joining one not yet started throws.
            acceptors.add(acceptor);
            acceptor.start();
        }
        if (listener.activated()) log.info("listening on {}", listener.describe());
        else log.info("listening on {} (backlog {})", describe(bound), config.backlog() > 0 ? config.backlog() : Listener.systemBacklog());
        return bound;
    }

    public static String describe(SocketAddress a) {
        if (a instanceof InetSocketAddress inet) return inet.getHostString() + ":" + inet.getPort();
        return a.toString();
    }

    private void acceptLoop(Listener listener) {
        while (!stopping) {
            Listener.Accepted client;
            try {
                client = listener.accept();
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
            String peer = peerName(client.remote());
            Handshake.Refusal refusal = admission.admit(client.local(), peer);
            if (refusal == Admission.FLOOD) {
                client.transport().close();
                continue;
            }
            Connection c = new Connection(this, client.transport(), peer,
                client.remote() instanceof InetSocketAddress inet ? inet.getAddress() : null, refusal);
            connections.add(c);
            if (stopping) {
                c.abort();
                client.transport().close();
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

    private String peerName(SocketAddress remote) {
        long id = connectionIds.incrementAndGet();
        if (remote instanceof InetSocketAddress inet) return inet.getHostString() + ":" + inet.getPort();
        return "unix#" + id;
    }

    void connectionClosed(Connection c) {
        if (connections.remove(c)) admission.release(c.admitted());
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

    /** The most bytes of the buffer budget that were ever on loan at once. */
    public long bufferPeakBytes() {
        return buffers.peakBytes();
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
            for (Listener l : listeners) out.add(l.address());
        }
        return out;
    }

    /** Number of open connections holding a slot (in handshake or transmission); clients being refused are not counted. */
    public int connectionCount() {
        return admission.admitted();
    }

    /** Requests read and not yet answered, over every connection. */
    int requestsInFlight() {
        int n = 0;
        for (Connection c : connections) n += c.requestsInFlight();
        return n;
    }

    /** Receive buffers lent to connections right now (0 when every connection is idle). */
    public int inputBuffersInUse() {
        return inputs.inUse();
    }

    /**
     * Stops accepting and drains the connections ({@link Drain}): the requests already read are answered, later
     * ones get {@code NBD_ESHUTDOWN}, and each connection is flushed and closed once its requests are answered,
     * within {@code drainTimeout}; then the exports are flushed and closed. Idempotent: a second call returns at once
     * (see {@link #endDrainNow} for ending a drain in progress).
     */
    public void stop(Duration drainTimeout) {
        List<Listener> toClose;
        List<Thread> toJoin;
        synchronized (stopLock) {
            if (stopped) return;
            stopped = true;
            stopping = true;
            toClose = List.copyOf(listeners);
            toJoin = List.copyOf(acceptors);
        }
        for (Listener l : toClose) l.close();
        awaitAcceptors(toJoin);
        drain.run(connections, exports, drainTimeout);
        io.shutdown();
        remote.shutdown();
        timers.shutdownNow();
        synchronized (stopLock) {
            stopLock.notifyAll();
        }
        log.info("stopped");
    }

    /**
     * Closing a listener that a thread is blocked accepting on only signals that thread: the kernel keeps the socket
     * bound until the thread has left accept, so a server started on the same port right after this one stops
     * would fail to bind without this wait.
     */
    private static void awaitAcceptors(List<Thread> acceptors) {
        for (Thread t : acceptors) {
            if (t == Thread.currentThread()) continue;
            try {
                if (!t.join(Duration.ofSeconds(5))) log.warn("{} did not stop within 5 s; its port may stay bound", t.getName());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    /**
     * Ends a drain in progress at once, or the next one as soon as it starts: its connections are closed as they
     * are, and the exports are flushed and closed. What a second SIGTERM does.
     */
    public void endDrainNow() {
        drain.cutShort();
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
}
