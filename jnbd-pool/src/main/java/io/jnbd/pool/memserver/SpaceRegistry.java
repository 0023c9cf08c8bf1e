package io.jnbd.pool.memserver;

import io.jnbd.server.Export;
import io.jnbd.server.ExportRegistry;
import io.jnbd.server.ExportTuning;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.DocumentBackend;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A memory server's exports: {@code status}, and one space per pool client and unit, made when the client
 * first opens it. It keeps each client's session (NMS): which instance of the client owns the id, how many
 * connections it has, and when its last one went, so that its data is freed once the grace has passed, or
 * at once when a new instance of the same client id arrives (the client was reinitialised).
 */
final class SpaceRegistry implements ExportRegistry {
    private static final Logger log = LoggerFactory.getLogger(SpaceRegistry.class);

    /** The status export's size: room for the JSON of a few hundred clients (MemServer lists at most 200). */
    static final int STATUS_BYTES = 64 * 1024;

    private final PageStore store;
    private final Duration grace;
    private final ScheduledExecutorService timers;
    private final Supplier<String> description;
    private final Export status;
    /** By client id. Guarded by this. */
    private final Map<Integer, Session> sessions = new HashMap<>();
    /**
     * Connections in transmission by export name. Every session of a pool client has a name of its own, so
     * whatever the server keeps by name (its statistics) would grow with each reconnection for the life of
     * the process; a name whose last connection went is reported gone. Guarded by this.
     */
    private final Map<String, Integer> namesInUse = new HashMap<>();
    private volatile Consumer<String> gone = name -> {};

    /** One instance of a pool client, and its spaces. Fields guarded by the registry. */
    private static final class Session {
        final int client;
        final long instance;
        final Map<Integer, SpaceBackend> spaces = new HashMap<>();
        int connections;
        /** The newest session of this instance that has connected; writes of older ones are refused. */
        volatile int latestSession;
        long lastDetachNanos;
        ScheduledFuture<?> expiry;

        Session(int client, long instance) {
            this.client = client;
            this.instance = instance;
        }
    }

    SpaceRegistry(PageStore store, Duration grace, ScheduledExecutorService timers, Supplier<String> description,
                  Supplier<MemServerStatus> status) {
        this.store = store;
        this.grace = grace;
        this.timers = timers;
        this.description = description;
        this.status = new Export("status", "jnbd memory server status (JSON)",
            new DocumentBackend(STATUS_BYTES, () -> status.get().toJson(), "memory server status (JSON)"));
    }

    @Override
    public Export find(String name) throws Refused {
        if (name.equals("status") || name.isEmpty()) return status;
        SpaceName s = SpaceName.parse(name);
        if (s == null) return null;
        Backend backend;
        synchronized (this) {
            Session session = sessions.get(s.client());
            if (session != null && session.instance != s.instance()) {
                if (session.connections > 0) {
                    throw new Refused("client " + s.client() + " is in use by another pool client (instance "
                        + HexFormat.of().toHexDigits(session.instance) + ")");
                }
                log.info("client {}: a new instance {} replaces {}; freeing what the old one stored", s.client(),
                    HexFormat.of().toHexDigits(s.instance()), HexFormat.of().toHexDigits(session.instance));
                drop(session);
                session = null;
            }
            if (session == null) {
                session = new Session(s.client(), s.instance());
                sessions.put(s.client(), session);
            }
            if (s.session() < session.latestSession) {
                throw new Refused("session " + s.session() + " of client " + s.client() + " is superseded by session "
                    + session.latestSession);
            }
            session.latestSession = s.session();
            SpaceBackend space = session.spaces.computeIfAbsent(s.unit(), u -> new SpaceBackend(store, s.space()));
            Session owner = session;
            backend = new FencedSpace(space, s.client(), s.session(), () -> owner.latestSession);
        }
        // A fresh export per connection: its description says how much is free now.
        return new Export(name, description.get(), backend, ExportTuning.defaultsFor(backend.traits()));
    }

    @Override
    public Collection<Export> listed() {
        return List.of(status);
    }

    @Override
    public Collection<Export> all() {
        return List.of(status);
    }

    @Override
    public void whenGone(Consumer<String> listener) {
        gone = listener;
    }

    @Override
    public void attached(Export export, String peer) {
        SpaceName s = SpaceName.parse(export.name());
        if (s == null) return;
        synchronized (this) {
            namesInUse.merge(export.name(), 1, Integer::sum);
            Session session = sessions.get(s.client());
            if (session == null || session.instance != s.instance()) return; // replaced while connecting
            if (session.connections++ == 0 && session.expiry != null) {
                session.expiry.cancel(false);
                session.expiry = null;
                log.info("client {}: back within the grace", s.client());
            }
        }
    }

    @Override
    public void detached(Export export, String peer) {
        SpaceName s = SpaceName.parse(export.name());
        if (s == null) return;
        boolean last;
        synchronized (this) {
            last = namesInUse.merge(export.name(), -1, Integer::sum) <= 0;
            if (last) namesInUse.remove(export.name());
        }
        if (last) gone.accept(export.name());
        synchronized (this) {
            Session session = sessions.get(s.client());
            if (session == null || session.instance != s.instance() || --session.connections > 0) return;
            session.lastDetachNanos = System.nanoTime();
            log.info("client {}: last connection gone; its data is freed in {}s unless it returns", s.client(), grace.toSeconds());
            try {
                session.expiry = timers.schedule(() -> expire(session), grace.toMillis(), TimeUnit.MILLISECONDS);
            } catch (java.util.concurrent.RejectedExecutionException e) {
                // the server is stopping: everything is freed with the store
            }
        }
    }

    private synchronized void expire(Session session) {
        if (sessions.get(session.client) != session || session.connections > 0) return;
        log.info("client {}: gone for {}s, freeing {} bytes", session.client, grace.toSeconds(), store.usedBytes(session.client));
        drop(session);
    }

    /** Frees everything the session's client stored. Caller holds this. */
    private void drop(Session session) {
        if (session.expiry != null) session.expiry.cancel(false);
        sessions.remove(session.client, session);
        store.dropClient(session.client);
    }

    /** Each client's part of the status report, at most {@code max} of them. */
    synchronized List<MemServerStatus.Client> clients(int max) {
        List<MemServerStatus.Client> out = new ArrayList<>();
        long now = System.nanoTime();
        for (Session s : sessions.values()) {
            if (out.size() == max) break;
            double left = s.connections > 0 ? -1
                : Math.max(0, (grace.toNanos() - (now - s.lastDetachNanos)) / 1e9);
            out.add(new MemServerStatus.Client(s.client, HexFormat.of().toHexDigits(s.instance), s.connections,
                store.usedBytes(s.client), left));
        }
        return out;
    }

    synchronized int clientCount() {
        return sessions.size();
    }

    /** The backend of one client's space, for tests. */
    synchronized Backend space(int client, int unit) {
        Session s = sessions.get(client);
        return s == null ? null : s.spaces.get(unit);
    }
}
