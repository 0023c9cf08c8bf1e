package io.jnbd.pool.memserver;

import io.jnbd.server.Client;
import io.jnbd.server.Export;
import io.jnbd.server.ExportRegistry;
import io.jnbd.server.ExportTuning;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.DocumentBackend;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
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
 * first opens it. It keeps each client's session (NMS): which instance of the client owns the id, which TLS
 * identity made it, how many connections it has, and when its last one went, so that its data is freed once the
 * grace has passed.
 *
 * <p>Who may open a space: without a TLS identity, whoever names its instance, which is therefore never shown
 * (not in status, logs or {@code NBD_OPT_LIST}). A space made under a TLS identity (a PSK identity, or the first
 * name in a client certificate) opens only for that identity. A new instance of a client id that is known here
 * is refused while the old one's data is kept; only the owning identity may replace it before the grace ends
 * (its pool client was restarted). A refused name leaves nothing behind, and what is kept for a name that was
 * opened but never used goes after the grace, so that names tried in a loop cost no memory.
 */
final class SpaceRegistry implements ExportRegistry {
    private static final Logger log = LoggerFactory.getLogger(SpaceRegistry.class);

    /** The status export's size: room for the JSON of a few hundred clients (MemServer lists at most 200). */
    static final int STATUS_BYTES = 64 * 1024;
    /**
     * How long a session opened but not yet in transmission is kept at least: long enough for the connection that
     * opened it to get there, even with no grace.
     */
    private static final Duration UNUSED_KEPT = Duration.ofSeconds(10);
    /** What {@link #find(String)} serves as: a client with no address and no TLS identity. */
    private static final Client NOBODY = new Client(null, List.of());

    private final PageStore store;
    private final Duration grace;
    private final ScheduledExecutorService timers;
    private final Supplier<String> description;
    private final MemServerAccess access;
    private final Export status;
    /** What a reader who may not see the clients is served: the server's figures, the clients counted. */
    private final Export statusSummary;
    /** By client id. Guarded by this. */
    private final Map<Integer, Session> sessions = new HashMap<>();
    /**
     * Connections in transmission by export name. Every session of a pool client has a name of its own, so
     * whatever the server keeps by name (its statistics) would grow with each reconnection for the life of
     * the process; a name whose last connection went is reported gone. Guarded by this.
     */
    private final Map<String, Integer> namesInUse = new HashMap<>();
    private volatile Consumer<String> gone = name -> {};

    /** One instance of a pool client. Fields guarded by the registry. */
    private static final class Session {
        final int client;
        final long instance;
        /** The TLS identity that made it, which alone may open it; null: made without one. */
        final String owner;
        int connections;
        /** The newest session of this instance that has connected; writes of older ones are refused. */
        volatile int latestSession;
        long lastDetachNanos;
        ScheduledFuture<?> expiry;

        Session(int client, long instance, String owner) {
            this.client = client;
            this.instance = instance;
            this.owner = owner;
        }
    }

    SpaceRegistry(PageStore store, Duration grace, ScheduledExecutorService timers, Supplier<String> description,
                  java.util.function.Function<Boolean, MemServerStatus> status, MemServerAccess access) {
        this.store = store;
        this.grace = grace;
        this.timers = timers;
        this.description = description;
        this.access = access;
        this.status = new Export("status", "jnbd memory server status (JSON)",
            new DocumentBackend(STATUS_BYTES, () -> status.apply(true).toJson(), "memory server status (JSON)"));
        this.statusSummary = new Export("status", "jnbd memory server status (JSON)",
            new DocumentBackend(STATUS_BYTES, () -> status.apply(false).toJson(), "memory server status (JSON)"));
    }

    @Override
    public Export find(String name) throws Refused {
        return find(name, NOBODY);
    }

    @Override
    public Export find(String name, Client client) throws Refused {
        if (!access.allow().allows(client)) {
            throw new Refused("not admitted by this memory server's --allow", client.identities().isEmpty() && access.allow().admitsIdentities());
        }
        if (name.equals("status") || name.isEmpty()) return access.statusClients().admits(client) ? status : statusSummary;
        SpaceName s = SpaceName.parse(name);
        if (s == null) return null;
        String identity = client.identities().isEmpty() ? null : client.identities().getFirst();
        Backend backend;
        synchronized (this) {
            Session session = sessions.get(s.client());
            if (session != null && session.owner != null && !session.owner.equals(identity)) {
                log.warn("client {}: {} asked for {}, which belongs to identity '{}': refused", s.client(),
                    client.describe(), s.shown(), session.owner);
                throw new Refused("client " + s.client() + " belongs to another identity");
            }
            if (session != null && session.instance != s.instance()) {
                if (session.connections > 0 || identity == null || !identity.equals(session.owner)) {
                    log.info("client {}: instance ~{} refused, the client being held by instance ~{}{}", s.client(),
                        SpaceName.fingerprint(s.instance()), SpaceName.fingerprint(session.instance),
                        session.connections > 0 ? " (connected)" : " (its data kept for the grace)");
                    throw new Refused("client " + s.client() + " is in use by another pool client");
                }
                log.info("client {}: identity '{}' starts instance ~{} in place of ~{}; freeing what the old one stored",
                    s.client(), identity, SpaceName.fingerprint(s.instance()), SpaceName.fingerprint(session.instance));
                drop(session);
                session = null;
            }
            if (session == null) {
                session = new Session(s.client(), s.instance(), identity);
                sessions.put(s.client(), session);
                // Freed unless a connection takes it up: a name only asked about keeps nothing for long.
                scheduleExpiry(session, grace.compareTo(UNUSED_KEPT) > 0 ? grace : UNUSED_KEPT);
            }
            if (s.session() < session.latestSession) {
                throw new Refused("session " + s.session() + " of client " + s.client() + " is superseded by session "
                    + session.latestSession);
            }
            session.latestSession = s.session();
            Session owner = session;
            backend = new FencedSpace(new SpaceBackend(store, s.space()), s.client(), s.session(), () -> owner.latestSession);
        }
        // A fresh export per connection: its description says how much is free now.
        return new Export(name, description.get(), backend, ExportTuning.defaultsFor(backend.traits()));
    }

    @Override
    public String shown(String name) {
        SpaceName s = SpaceName.parse(name);
        return s == null ? SpaceName.redact(name) : s.shown();
    }

    @Override
    public Collection<Export> listed() {
        return List.of(status);
    }

    @Override
    public Collection<Export> listed(Client client) {
        return access.allow().allows(client) ? List.of(status) : List.of();
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
                if (session.lastDetachNanos != 0) log.info("client {}: back within the grace", s.client());
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
            scheduleExpiry(session, grace);
        }
    }

    /** Caller holds this. */
    private void scheduleExpiry(Session session, Duration after) {
        if (session.expiry != null) session.expiry.cancel(false);
        try {
            session.expiry = timers.schedule(() -> expire(session), after.toMillis(), TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // the server is stopping: everything is freed with the store
        }
    }

    private synchronized void expire(Session session) {
        if (sessions.get(session.client) != session || session.connections > 0) return;
        long used = store.usedBytes(session.client);
        // A name opened and never used (or tried by a guesser) is dropped quietly: a loop of them must not flood the log.
        if (used > 0 || session.lastDetachNanos != 0) log.info("client {}: gone for {}s, freeing {} bytes", session.client, grace.toSeconds(), used);
        else log.debug("client {}: opened but never used; forgotten", session.client);
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
            out.add(new MemServerStatus.Client(s.client, SpaceName.fingerprint(s.instance), s.owner, s.connections,
                store.usedBytes(s.client), left));
        }
        return out;
    }

    synchronized int clientCount() {
        return sessions.size();
    }
}
