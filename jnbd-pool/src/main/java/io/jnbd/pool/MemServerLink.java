package io.jnbd.pool;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;
import io.jnbd.pool.memserver.MemServerStatus;
import io.jnbd.pool.memserver.ServerDescription;
import io.jnbd.pool.memserver.SpaceName;
import io.jnbd.tls.TlsClientSettings;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The pool client's tie to one memory server (NMS: the stream connection that says whether the peer is up). A
 * session is one stretch of being connected; a replica belongs to the session it was made in, so a lost
 * connection or a restarted server ends every replica it held. A supervisor thread connects, reconnects with
 * back-off, and reads the server's status every second: its free memory (the load placement weighs) and a
 * heartbeat that finds a hung server while the pool is idle.
 */
final class MemServerLink {
    private static final Logger log = LoggerFactory.getLogger(MemServerLink.class);
    private static final Duration POLL = Duration.ofSeconds(1);
    private static final long MAX_BACKOFF_MILLIS = 5000;
    /**
     * What a link's connect may take beyond the server timeout: the first handshake of a process loads the NBD
     * client's and server's code on both ends, and under TLS initialises the TLS engine too, seconds on a busy
     * machine; a pool must not give up on every memory server at start for it. Requests keep the server timeout.
     */
    private static final Duration CONNECT_ALLOWANCE = Duration.ofSeconds(2);
    private static final Duration TLS_HANDSHAKE_ALLOWANCE = Duration.ofSeconds(10);

    /** One stretch of being connected. {@code generation} numbers them; {@code incarnation} is the server's. */
    record Session(int generation, long incarnation, NbdClient data, NbdClient status) {}

    /** What the volume hears from its links. */
    interface Listener {
        void up(MemServerLink link);

        void down(MemServerLink link, int generation, String why);
    }

    /** The client's identity on the servers, changed only before any link is up (see PoolVolume). */
    interface Identity {
        SpaceName space();
    }

    private final String name;
    private final InetSocketAddress address;
    private final Identity identity;
    private final Duration timeout;
    private final int extentSize;
    private final Listener listener;
    /** TLS on both connections; null: plain text. */
    private final TlsClientSettings tls;
    /**
     * The current session, null while the server is down; read without a lock by every request. Three moves,
     * each made in one place: null to a session only in {@link #connect}, under this link's monitor, which keeps
     * connects apart (nothing else leaves null, so a set is enough); a session to null in {@link #fail} by
     * compare-and-set, from whichever thread saw it fail, so the first report wins and a late one about an
     * ended session changes nothing; and to null for good in {@link #close}, under the monitor, so that a
     * connect under way ends first and none starts after. {@code fail} takes no lock: it runs on the threads
     * that complete requests, which must not wait out a connect that may take the whole timeout.
     */
    private final AtomicReference<Session> session = new AtomicReference<>();
    private volatile long free = -1;
    private volatile String lastError = "not connected yet";
    private final AtomicInteger inFlight = new AtomicInteger();
    /**
     * Extents that have or had a copy on this server since its incarnation began or its orphans were last
     * trimmed: a superset, so that a copy is never forgotten when its session ends (a new placement here
     * counts on finding its extent's range empty).
     */
    final Set<Integer> extentsHeld = ConcurrentHashMap.newKeySet();
    /**
     * Trims of copies no longer referenced, by extent, until the server answers them. A later copy of the same
     * extent here lives at the same offsets, and its writes may travel on another connection of the session and
     * overtake the trim: they wait for it instead.
     */
    private final ConcurrentHashMap<Integer, CompletableFuture<Void>> discards = new ConcurrentHashMap<>();
    private long lastIncarnation;
    private int nextGeneration = 1;
    private volatile boolean closed;
    private final Object wake = new Object();
    private Thread supervisor;

    MemServerLink(String name, Identity identity, Duration timeout, int extentSize, Listener listener) {
        this(name, identity, timeout, extentSize, listener, null);
    }

    MemServerLink(String name, Identity identity, Duration timeout, int extentSize, Listener listener, TlsClientSettings tls) {
        this.tls = tls;
        this.name = name;
        this.address = parse(name);
        this.identity = identity;
        this.timeout = timeout;
        this.extentSize = extentSize;
        this.listener = listener;
    }

    static InetSocketAddress parse(String hostPort) {
        int colon = hostPort.lastIndexOf(':');
        if (colon <= 0) throw new IllegalArgumentException("memory server '" + hostPort + "' is not HOST:PORT");
        String host = hostPort.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) host = host.substring(1, host.length() - 1);
        try {
            int port = Integer.parseInt(hostPort.substring(colon + 1));
            if (port < 1 || port > 65535) throw new NumberFormatException();
            return InetSocketAddress.createUnresolved(host, port);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("memory server '" + hostPort + "' has no valid port");
        }
    }

    String name() {
        return name;
    }

    /** The current session, or null while the server is down. */
    Session session() {
        return session.get();
    }

    long free() {
        return free;
    }

    /** After an ENOSPC: no more placements here until the next status says otherwise. */
    void markFull() {
        free = 0;
    }

    /** What placement took from the free memory it saw, until the next status says how much is left. */
    void reserve(long bytes) {
        long f = free;
        if (f > 0) free = Math.max(0, f - bytes);
    }

    /** Memory a trim gave back, until the next status says how much is free. */
    void credit(long bytes) {
        long f = free;
        if (f >= 0) free = f + bytes;
    }

    /** Records a trim that discards this server's copy of {@code extent}; see {@link #discarded}. */
    void discarding(int extent, CompletableFuture<?> trim) {
        CompletableFuture<Void> answered = trim.handle((v, x) -> null);
        CompletableFuture<Void> pending = discards.merge(extent, answered, (a, b) -> CompletableFuture.allOf(a, b));
        pending.whenComplete((v, x) -> discards.remove(extent, pending));
    }

    /** Completes (never exceptionally) once every discard of {@code extent} sent here so far has been answered. */
    CompletableFuture<Void> discarded(int extent) {
        CompletableFuture<Void> pending = discards.get(extent);
        return pending != null ? pending : CompletableFuture.completedFuture(null);
    }

    int inFlight() {
        return inFlight.get();
    }

    String lastError() {
        return lastError;
    }

    /** Starts the supervisor; connects in the background. */
    void start() {
        supervisor = Thread.ofVirtual().name("jnbd-pool-" + name).start(this::supervise);
    }

    /** Connects now on the caller's thread; throws why it could not. The supervisor keeps trying afterwards. */
    void connectOnce() throws IOException {
        synchronized (this) {
            if (session.get() != null) return;
            connect();
        }
        listener.up(this);
    }

    private void supervise() {
        long backoff = 200;
        while (!closed) {
            Session s = session.get();
            if (s == null) {
                try {
                    synchronized (this) {
                        if (session.get() == null && !closed) connect();
                    }
                    backoff = 200;
                    listener.up(this);
                    continue;
                } catch (IOException | RuntimeException e) {
                    lastError = SpaceName.redact(e.getMessage());
                    log.debug("memory server {}: cannot connect: {}", name, lastError);
                    sleep(backoff);
                    backoff = Math.min(MAX_BACKOFF_MILLIS, backoff * 2);
                    continue;
                }
            }
            sleep(POLL.toMillis());
            if (session.get() == s && !closed) poll(s);
        }
    }

    /** Caller holds this. */
    private void connect() throws IOException {
        InetSocketAddress resolved = new InetSocketAddress(address.getHostString(), address.getPort());
        if (resolved.isUnresolved()) throw new IOException("cannot resolve " + address.getHostString());
        // The session number lets the server refuse writes still queued from an earlier session of ours.
        SpaceName space = identity.space().withSession(nextGeneration);
        Duration connectTimeout = timeout.plus(tls == null ? CONNECT_ALLOWANCE : TLS_HANDSHAKE_ALLOWANCE);
        ClientOptions options = ClientOptions.defaults().withConnectTimeout(connectTimeout).withRequestTimeout(timeout)
            .withConnections(2).withTls(tls);
        NbdClient data;
        try {
            data = NbdClient.connect(uri(resolved, space.exportName()), options);
        } catch (IOException e) {
            // The space's name holds the instance, the key to the space without TLS: it must not reach a log or status.
            throw new IOException(SpaceName.redact(e.getMessage()), e.getCause());
        }
        NbdClient status = null;
        try {
            ServerDescription desc = ServerDescription.parse(data.info().description());
            if (desc == null) throw new IOException(name + " is not a jnbd memory server (its description is '" + data.info().description() + "')");
            if (desc.incarnation() == lastIncarnation) {
                trimOrphans(data);
            } else {
                if (lastIncarnation != 0) log.info("memory server {} restarted (incarnation {}): it is empty", name, Long.toHexString(desc.incarnation()));
                extentsHeld.clear(); // a new incarnation holds nothing of ours
            }
            status = NbdClient.connect(uri(resolved, "status"), ClientOptions.defaults().withConnectTimeout(connectTimeout)
                .withRequestTimeout(timeout).withTls(tls));
            lastIncarnation = desc.incarnation();
            free = desc.free();
            lastError = null;
            session.set(new Session(nextGeneration++, desc.incarnation(), data, status));
            log.info("memory server {}: up (incarnation {}, {} MiB free)", name, Long.toHexString(desc.incarnation()), desc.free() >> 20);
        } catch (IOException | RuntimeException e) {
            closeQuietly(data);
            if (status != null) closeQuietly(status);
            throw e;
        }
    }

    /**
     * The same server after a lost connection still holds what this client wrote before; none of it is
     * referenced any more (the replicas went with the session). Trimming it before the server is used again
     * gives the memory back, and makes sure no later placement here could find old bytes.
     */
    private void trimOrphans(NbdClient data) throws IOException {
        List<Integer> orphans = new ArrayList<>(extentsHeld);
        if (orphans.isEmpty()) return;
        List<CompletableFuture<Void>> trims = new ArrayList<>();
        for (int e : orphans) trims.add(data.trim((long) e * extentSize, extentSize, false));
        try {
            CompletableFuture.allOf(trims.toArray(CompletableFuture[]::new)).get(timeout.toMillis() * 4, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            throw new IOException("could not free " + orphans.size() + " extents left from the last session: " + e.getMessage(), e);
        }
        orphans.forEach(extentsHeld::remove);
        log.info("memory server {}: back in the same incarnation; freed {} extents of the last session", name, orphans.size());
    }

    /**
     * Reads the server's status. A data request that outlives the server timeout ends the session; the status
     * read, which only stands in for requests while the pool is idle, gets twice as long: on a busy machine a
     * single slow poll of a live server would otherwise cost a needless recovery of everything it holds.
     */
    private void poll(Session s) {
        ByteBuffer buf = ByteBuffer.allocate((int) Math.min(s.status().size(), 64 * 1024));
        try {
            s.status().read(0, buf).get(2 * timeout.toMillis(), TimeUnit.MILLISECONDS);
            MemServerStatus st = MemServerStatus.parse(buf.array());
            if (Long.parseUnsignedLong(st.incarnation(), 16) != s.incarnation()) {
                fail(s, "the status is of another incarnation");
                return;
            }
            free = st.free();
        } catch (Exception e) {
            fail(s, "no status within " + 2 * timeout.toMillis() + " ms: " + rootMessage(e));
        }
    }

    /**
     * The server is lost for this session: its replicas go, the volume restores the copies elsewhere. Only the
     * first report of a session counts; a report about an older session is ignored.
     */
    void fail(Session s, String why) {
        if (s == null || !session.compareAndSet(s, null)) return;
        lastError = why;
        log.warn("memory server {}: lost ({})", name, why);
        Thread.ofVirtual().name("jnbd-pool-close-" + name).start(() -> {
            closeQuietly(s.data());
            closeQuietly(s.status());
        });
        listener.down(this, s.generation(), why);
        synchronized (wake) {
            wake.notifyAll();
        }
    }

    /**
     * Sends a request on a session's client, counting it in flight while it runs (for the least-busy choice of
     * reads). A client closed under the caller (its session lost meanwhile) fails the future like a lost
     * connection, never the caller.
     */
    <T> CompletableFuture<T> call(java.util.function.Supplier<CompletableFuture<T>> request) {
        CompletableFuture<T> f;
        try {
            f = request.get();
        } catch (RuntimeException e) {
            return CompletableFuture.failedFuture(new io.jnbd.client.NbdConnectionException("connection to " + name + " is closed", e));
        }
        inFlight.incrementAndGet();
        return f.whenComplete((v, e) -> inFlight.decrementAndGet());
    }

    void close() {
        closed = true;
        synchronized (wake) {
            wake.notifyAll();
        }
        if (supervisor != null) {
            try {
                supervisor.join(timeout.toMillis() * 2);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        Session s;
        synchronized (this) {
            s = session.getAndSet(null);
        }
        if (s != null) {
            closeQuietly(s.data());
            closeQuietly(s.status());
        }
    }

    private void sleep(long millis) {
        synchronized (wake) {
            if (closed) return;
            try {
                wake.wait(millis);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                closed = true;
            }
        }
    }

    private static NbdUri uri(InetSocketAddress a, String export) {
        return new NbdUri(URI.create("nbd://" + a.getHostString() + ":" + a.getPort() + "/" + export), a, export);
    }

    private static void closeQuietly(NbdClient c) {
        try {
            c.close();
        } catch (RuntimeException e) {
            // closing a broken connection; the session is over either way
        }
    }

    static String rootMessage(Throwable e) {
        while ((e instanceof java.util.concurrent.CompletionException || e instanceof java.util.concurrent.ExecutionException)
            && e.getCause() != null) e = e.getCause();
        return e.getMessage() != null ? e.getMessage() : e.toString();
    }

    @Override
    public String toString() {
        return name;
    }
}
