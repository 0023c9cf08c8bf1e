package io.jnbd.server;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.DocumentBackend;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.StatusReporting;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The exports a list of specs names, open: what a server serves at start and after each reload. A reload opens
 * only what it must: an export whose spec opens the same backend as before ({@link ExportSpec#sameBackend})
 * keeps that backend, and a memory export its data; its description, tuning and allow list are the new ones, and
 * where its filters changed, a new chain of them is built in front of the backend (connections already open go on
 * through the old chain until they close).
 * A backend with a state of its own (a pool) also gets an export {@code NAME/status} that reads it as JSON.
 */
public final class ExportSet {

    /** Opening the backend of {@link #spec} failed; {@link #getCause()} says why. */
    public static final class OpenFailed extends IOException {
        private final transient ExportSpec spec;

        OpenFailed(ExportSpec spec, IOException cause) {
            super("export '" + spec.name() + "': cannot open " + spec.target() + ": " + cause.getMessage(), cause);
            this.spec = spec;
        }

        public ExportSpec spec() {
            return spec;
        }

        @Override
        public synchronized IOException getCause() {
            return (IOException) super.getCause();
        }
    }

    /** What a reload did to the exports, by name. */
    public record Changes(List<String> added, List<String> removed, List<String> changed, List<String> reopened) {
        public boolean none() {
            return added.isEmpty() && removed.isEmpty() && changed.isEmpty();
        }
    }

    private final Map<String, ExportSpec> specs;
    private final Map<String, Export> opened;
    private final Exports exports;

    private ExportSet(Map<String, ExportSpec> specs, Map<String, Export> opened, Exports exports) {
        this.specs = specs;
        this.opened = opened;
        this.exports = exports;
    }

    /** Opens every spec. */
    public static ExportSet open(List<ExportSpec> specs, String defaultName) throws OpenFailed {
        return open(specs, defaultName, null);
    }

    /**
     * Opens the specs, taking the backends of {@code previous} (may be null) where they are the same. On any
     * failure the backends this call opened are closed again and {@code previous} is untouched; a bad default
     * export or a name given twice is an {@link IllegalArgumentException} with a message for the user.
     */
    public static ExportSet open(List<ExportSpec> specs, String defaultName, ExportSet previous) throws OpenFailed {
        Map<String, ExportSpec> byName = new LinkedHashMap<>();
        Map<String, Export> opened = new LinkedHashMap<>();
        List<Backend> fresh = new ArrayList<>();
        try {
            for (ExportSpec s : specs) {
                if (byName.putIfAbsent(s.name(), s) != null) throw new IllegalArgumentException("export '" + s.name() + "' is named twice");
                ExportSpec before = previous == null ? null : previous.specs.get(s.name());
                Backend backend;
                if (before != null && before.sameBackend(s)) {
                    Backend chain = previous.opened.get(s.name()).backend();
                    if (before.filters().equals(s.filters())) {
                        backend = chain;
                    } else {
                        // The old chain stays with its connections; the registry closes it after them (SharedBackend).
                        SharedBackend hold = ((SharedBackend) before.filters().unwrap(chain)).another();
                        backend = wrap(s, hold);
                        fresh.add(backend);
                    }
                } else {
                    Backend backendItself;
                    try {
                        backendItself = s.openBackend();
                    } catch (IOException e) {
                        throw new OpenFailed(s, e);
                    }
                    backend = wrap(s, new SharedBackend(backendItself));
                    fresh.add(backend);
                }
                opened.put(s.name(), new Export(s.name(), s.description(), backend, s.tuning(), s.access()));
            }
            List<Export> all = new ArrayList<>(opened.values());
            for (Export e : opened.values()) {
                StatusReporting r = FilterBackend.find(e.backend(), StatusReporting.class);
                if (r != null) all.add(statusOf(e, r));
            }
            return new ExportSet(byName, opened, new Exports(all, defaultName));
        } catch (OpenFailed | RuntimeException e) {
            for (Backend b : fresh) closeQuietly(b);
            throw e;
        }
    }

    /** The chain of {@code s}'s filters over {@code hold}; on failure the hold is given up. */
    private static Backend wrap(ExportSpec s, SharedBackend hold) throws OpenFailed {
        try {
            return s.wrap(hold);
        } catch (IOException | RuntimeException e) {
            closeQuietly(hold);
            if (e instanceof IOException io) throw new OpenFailed(s, io);
            throw (RuntimeException) e;
        }
    }

    private static Export statusOf(Export e, StatusReporting r) {
        var status = new DocumentBackend(256 * 1024, r::statusJson, "status of " + e.name());
        return new Export(e.name() + "/status", "status of '" + e.name() + "' (JSON)", status,
            ExportTuning.defaultsFor(status.traits()), e.access());
    }

    public Exports exports() {
        return exports;
    }

    /** The spec each export was opened from, in the order given. */
    public Map<String, ExportSpec> specs() {
        return java.util.Collections.unmodifiableMap(specs);
    }

    /** How this set differs from {@code previous}: exports added, removed, changed, and of those changed the ones reopened. */
    public Changes changesFrom(ExportSet previous) {
        List<String> added = new ArrayList<>(), removed = new ArrayList<>(), changed = new ArrayList<>(), reopened = new ArrayList<>();
        for (var e : specs.entrySet()) {
            ExportSpec before = previous.specs.get(e.getKey());
            if (before == null) added.add(e.getKey());
            else if (!before.equals(e.getValue())) {
                changed.add(e.getKey());
                if (base(e.getKey()) != previous.base(e.getKey())) reopened.add(e.getKey());
            }
        }
        for (String name : previous.specs.keySet()) if (!specs.containsKey(name)) removed.add(name);
        return new Changes(added, removed, changed, reopened);
    }

    /** The backend of export {@code name}, without its filters and the hold on it. */
    private Backend base(String name) {
        return ((SharedBackend) specs.get(name).filters().unwrap(opened.get(name).backend())).inner();
    }

    private static void closeQuietly(Backend b) {
        try {
            b.close();
        } catch (IOException ignored) {
            // the failure being reported is the one that matters
        }
    }
}
