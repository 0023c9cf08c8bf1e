package io.jnbd.server;

import io.jnbd.server.backend.Backend;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A set of exports that a reload replaces while the server runs. The replacement is atomic: each lookup sees
 * the old set or the new one, whole. A connection keeps the export it opened. A backend the new set no longer
 * uses stops being found at once, and is closed when its last connection has ended, and no sooner than
 * {@code grace} after the replacement: a client that found it during its handshake starts using it within
 * the handshake timeout, so that is the grace to give.
 */
public final class ReloadableExports implements ExportRegistry {
    private static final Logger log = LoggerFactory.getLogger(ReloadableExports.class);

    private record Retired(Export export, long closableAt) {}

    private final Duration grace;
    private volatile Exports current;
    private final Object lock = new Object();
    /** Connections in the transmission phase, by backend (a backend survives a reload that changes its export's settings). */
    private final Map<Backend, Integer> users = new IdentityHashMap<>();
    private final Map<Backend, Retired> retired = new IdentityHashMap<>();
    private boolean stopped;
    private volatile Consumer<String> gone = name -> {};

    public ReloadableExports(Exports initial, Duration grace) {
        this.current = initial;
        this.grace = grace;
    }

    /** The set lookups see now. */
    public Exports current() {
        return current;
    }

    /**
     * Makes {@code next} the set that new clients see. Backends of the current set that {@code next} does not
     * hold are retired: closed once nobody uses them.
     */
    public void replace(Exports next) {
        Set<Backend> kept = Collections.newSetFromMap(new IdentityHashMap<>());
        for (Export e : next.all()) kept.add(e.backend());
        long closableAt = System.nanoTime() + grace.toNanos();
        synchronized (lock) {
            if (stopped) throw new IllegalStateException("the server has stopped");
            for (Export e : current.all()) {
                if (!kept.contains(e.backend())) retired.putIfAbsent(e.backend(), new Retired(e, closableAt));
            }
            current = next;
        }
        CompletableFuture.delayedExecutor(grace.toNanos(), TimeUnit.NANOSECONDS).execute(this::closeIdle);
    }

    /** Backends retired and not yet closed: those some connection still uses, or still within their grace. */
    public int retiredCount() {
        synchronized (lock) {
            return retired.size();
        }
    }

    @Override
    public Export find(String name) {
        return current.find(name);
    }

    @Override
    public Export find(String name, Client client) throws Refused {
        return current.find(name, client);
    }

    @Override
    public Collection<Export> listed() {
        return current.listed();
    }

    @Override
    public Collection<Export> listed(Client client) {
        return current.listed(client);
    }

    /** The current set, and the retired exports still open. */
    @Override
    public Collection<Export> all() {
        synchronized (lock) {
            List<Export> out = new ArrayList<>(current.all());
            for (Retired r : retired.values()) out.add(r.export());
            return out;
        }
    }

    @Override
    public Collection<Export> stop() {
        synchronized (lock) {
            stopped = true;
            List<Export> out = new ArrayList<>(current.all());
            for (Retired r : retired.values()) out.add(r.export());
            retired.clear();
            return out;
        }
    }

    @Override
    public void whenGone(Consumer<String> listener) {
        gone = listener;
    }

    @Override
    public void attached(Export export, String peer) {
        synchronized (lock) {
            users.merge(export.backend(), 1, Integer::sum);
        }
    }

    @Override
    public void detached(Export export, String peer) {
        boolean wasRetired;
        synchronized (lock) {
            users.computeIfPresent(export.backend(), (b, n) -> n == 1 ? null : n - 1);
            wasRetired = retired.containsKey(export.backend());
        }
        if (wasRetired) closeIdle();
    }

    /** Closes the retired backends nobody uses whose grace is over. */
    private void closeIdle() {
        List<Export> toClose = new ArrayList<>();
        long now = System.nanoTime();
        synchronized (lock) {
            var it = retired.entrySet().iterator();
            while (it.hasNext()) {
                var e = it.next();
                if (!users.containsKey(e.getKey()) && now - e.getValue().closableAt() >= 0) {
                    toClose.add(e.getValue().export());
                    it.remove();
                }
            }
        }
        for (Export e : toClose) {
            try {
                e.backend().flush();
                e.backend().close();
                log.info("export '{}': closed, a reload having removed or replaced it and its last client gone", e.name());
            } catch (IOException ex) {
                log.error("export '{}': flush on close failed: {}", e.name(), ex.toString());
            }
            if (!named(e.name())) gone.accept(e.name());
        }
    }

    /** Some export of the current set, or a retired one still open, is called {@code name}. */
    private boolean named(String name) {
        synchronized (lock) {
            for (Export e : current.all()) if (e.name().equals(name)) return true;
            for (Retired r : retired.values()) if (r.export().name().equals(name)) return true;
            return false;
        }
    }
}
