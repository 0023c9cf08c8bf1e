package io.jnbd.server;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendFactories;
import io.jnbd.server.backend.BackendFactory;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.FilterFactories;
import io.jnbd.server.backend.FilterFactory;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * One export as the user writes it: {@code NAME=KIND:TARGET[,option...]}, e.g. {@code disk=file:/var/lib/vm.img,mode=direct}
 * or {@code scratch=memory:4G}. The options every export takes are {@code readonly}, {@code split=SIZE},
 * {@code chunk=SIZE}, {@code streams=N}, {@code scheduler=none|sorted}, {@code allow=ENTRY;ENTRY...} and
 * {@code readonly-for=ENTRY;ENTRY...} (see {@link AllowList}; repeatable) and {@code description=TEXT}, which runs to the end of the spec and so may contain
 * commas. {@code filter=NAME} (repeatable, outermost first) stacks a filter in front of the backend, and a key that a
 * filter takes belongs to that filter (see {@link FilterStack}); {@code readonly} is short for the read-only filter,
 * outermost. Every other option belongs to the kind, whose {@link BackendFactory} checks it.
 */
public record ExportSpec(String name, String kind, String target, BackendOptions options, FilterStack filters,
                         String description, ExportTuning tuning, AllowList access) {

    /** Parses {@code NAME=SPEC}; the message of the exception is meant for the user as it is. */
    public static ExportSpec parse(String text) {
        int eq = text.indexOf('=');
        int colon = text.indexOf(':');
        if (eq <= 0 || (colon >= 0 && colon < eq)) {
            throw new IllegalArgumentException("export '" + text + "' is not NAME=file:PATH or NAME=memory:SIZE");
        }
        return parse(text.substring(0, eq), text.substring(eq + 1));
    }

    public static ExportSpec parse(String name, String spec) {
        return named(name, () -> parseSpec(name, spec));
    }

    /** Makes the spec of export {@code name}; a message about it starts by naming it. */
    private static ExportSpec named(String name, java.util.function.Supplier<ExportSpec> make) {
        if (name.isEmpty() || name.getBytes(java.nio.charset.StandardCharsets.UTF_8).length > 4096) {
            throw new IllegalArgumentException("export name must be 1 to 4096 bytes");
        }
        String where = "export '" + name + "': ";
        try {
            return make.get();
        } catch (IllegalArgumentException e) {
            throw e.getMessage().startsWith(where) ? e : new IllegalArgumentException(where + e.getMessage());
        }
    }

    private static ExportSpec parseSpec(String name, String spec) {
        int colon = spec.indexOf(':');
        if (colon <= 0) throw new IllegalArgumentException("'" + spec + "' does not start with " + BackendFactories.kindList());
        String kind = spec.substring(0, colon).toLowerCase(Locale.ROOT);
        BackendFactory factory = factory(kind);
        String rest = spec.substring(colon + 1);
        String description = "";
        int d = rest.indexOf(",description=");
        if (d >= 0) {
            description = rest.substring(d + ",description=".length());
            rest = rest.substring(0, d);
        }
        String[] parts = rest.split(",", -1);
        String target = parts[0];
        List<Map.Entry<String, String>> options = new ArrayList<>();
        boolean ownSeen = false;
        for (int i = 1; i < parts.length; i++) {
            String opt = parts[i];
            int e = opt.indexOf('=');
            String key = e < 0 ? opt : opt.substring(0, e);
            String value = e < 0 ? null : opt.substring(e + 1);
            if (value == null && !ownSeen && !GENERAL.contains(key) && FilterFactories.owning(key) == null && factory.continuesTarget(key)) {
                target += "," + key;
                continue;
            }
            ownSeen |= !GENERAL.contains(key);
            options.add(new java.util.AbstractMap.SimpleImmutableEntry<>(key, value));
        }
        return build(name, kind, factory, target, options, description);
    }

    /**
     * An export given in parts, as a config file's table gives it: {@code options} are {@code key=value} pairs (a
     * null value: the bare key, such as {@code readonly}), {@code allow} may come more than once. The target and
     * description are taken whole, commas and all.
     */
    public static ExportSpec of(String name, String kind, String target, List<Map.Entry<String, String>> options,
                                String description) {
        String k = kind.toLowerCase(Locale.ROOT);
        return named(name, () -> build(name, k, factory(k), target, options, description));
    }

    /** The options every kind of export takes; the others belong to the kind. */
    private static final java.util.Set<String> GENERAL = java.util.Set.of("readonly", "ro", "split", "chunk", "streams", "scheduler", "allow",
        "readonly-for");

    private static BackendFactory factory(String kind) {
        BackendFactory factory = BackendFactories.of(kind);
        if (factory == null) {
            throw new IllegalArgumentException("unknown backend '" + kind + "' (use " + BackendFactories.kindList() + ")");
        }
        return factory;
    }

    private static ExportSpec build(String name, String kind, BackendFactory factory, String target,
                                    List<Map.Entry<String, String>> options, String description) {
        Map<String, String> general = new LinkedHashMap<>(), own = new LinkedHashMap<>();
        Map<String, String> filterKeys = new LinkedHashMap<>();
        List<String> allow = new ArrayList<>(), readOnlyFor = new ArrayList<>(), filterNames = new ArrayList<>();
        for (Map.Entry<String, String> o : options) {
            if (o.getKey().equals("filter")) filterNames.add(o.getValue());
        }
        for (Map.Entry<String, String> o : options) {
            String key = o.getKey(), value = o.getValue();
            if (key.equals("allow")) allow.add(value);
            else if (key.equals("readonly-for")) readOnlyFor.add(value);
            else if (key.equals("filter")) continue;
            else if (GENERAL.contains(key)) general.put(key, value);
            else if (filterTakes(key, filterNames, factory)) {
                String before = filterKeys.get(key);
                boolean repeats = before != null && value != null && FilterFactories.owning(key).repeatable().contains(key);
                filterKeys.put(key, repeats ? before + ";" + value : value);
            }
            else if (!factory.options().contains(key)) {
                throw new IllegalArgumentException("unknown option '" + key + "' for a " + kind + ": export"
                    + (filterNames.isEmpty() ? "" : " or its filters (" + String.join(", ", filterNames) + ")"));
            } else own.put(key, value);
        }
        BackendOptions backendOptions = new BackendOptions(own);
        factory.check(target, backendOptions);
        FilterStack filters = FilterStack.of(filterNames, readOnly(general), filterKeys, factory.imageFile(target, backendOptions));
        filters.checkStacking();
        return new ExportSpec(name, kind, target, backendOptions, filters, description,
            tuning(new BackendOptions(general), filters.traits(factory.traits(target, backendOptions))), AllowList.parse(allow, readOnlyFor));
    }

    /**
     * Whether {@code key} goes to a filter rather than the backend: a filter's key does, except where the backend
     * takes a key of the same name and the spec names no filter owning it (a pool's own {@code cache=SIZE} beside
     * nbdkit's {@code cache=writeback} of the cache filter: with {@code filter=cache} the filter's meaning wins).
     */
    private static boolean filterTakes(String key, List<String> filterNames, BackendFactory factory) {
        FilterFactory owner = FilterFactories.owning(key);
        if (owner == null) return false;
        return !factory.options().contains(key) || filterNames.contains(owner.name());
    }

    /**
     * Whether {@code other} opens the same backend: same kind, target, kind options and read-only flag (whether the
     * stack holds a filter that writes nothing below it, with which the backend is opened read-only). The rest (filters, description,
     * tuning, who may connect) belongs to the export, so a reload that changes only that keeps the open backend, and
     * a memory export its data; where the filters changed, {@link ExportSet} builds a new chain in front of it.
     */
    public boolean sameBackend(ExportSpec other) {
        return kind.equals(other.kind) && target.equals(other.target) && options.asMap().equals(other.options.asMap())
            && filters.opensBaseReadOnly() == other.filters.opensBaseReadOnly();
    }

    /** Whether the export refuses writes: its stack holds the read-only filter. */
    public boolean readOnly() {
        return filters.readOnly();
    }

    /**
     * This spec as {@code --export} takes it after {@code NAME=}: {@code parse(name, text())} gives it back unless a
     * target or an option holds a comma (then only {@link #of} with {@link #parts()} does).
     */
    public String text() {
        StringBuilder b = new StringBuilder(kind).append(':').append(target);
        for (var p : parts()) b.append(',').append(p.getKey()).append(p.getValue() == null ? "" : "=" + p.getValue());
        if (!description.isEmpty()) b.append(",description=").append(description);
        return b.toString();
    }

    /**
     * The options of this spec, a bare key's value null: the kind's, then the filters outermost first (readonly or
     * filter=NAME, then its keys), tuning where it differs from the defaults, allow and readonly-for.
     */
    public List<Map.Entry<String, String>> parts() {
        List<Map.Entry<String, String>> out = new ArrayList<>();
        options.asMap().forEach((k, v) -> out.add(new java.util.AbstractMap.SimpleImmutableEntry<>(k, v)));
        out.addAll(filters.parts());
        ExportTuning defaults = ExportTuning.defaultsFor(traits());
        if (tuning.splitThreshold() != defaults.splitThreshold()) out.add(Map.entry("split", size(tuning.splitThreshold())));
        if (tuning.chunkSize() != defaults.chunkSize()) out.add(Map.entry("chunk", size(tuning.chunkSize())));
        if (tuning.streams() != defaults.streams()) out.add(Map.entry("streams", Integer.toString(tuning.streams())));
        if (tuning.scheduler() != defaults.scheduler()) out.add(Map.entry("scheduler", tuning.scheduler().name().toLowerCase(Locale.ROOT)));
        if (access.allowText() != null) out.add(Map.entry("allow", access.allowText()));
        if (access.readOnlyText() != null) out.add(Map.entry("readonly-for", access.readOnlyText()));
        return out;
    }

    /** {@code bytes} in the largest of K, M, G, T that divides it. */
    private static String size(long bytes) {
        String units = "KMGT";
        for (int i = units.length(); i > 0; i--) {
            long unit = 1L << (10 * i);
            if (bytes % unit == 0) return bytes / unit + units.substring(i - 1, i);
        }
        return Long.toString(bytes);
    }


    private static boolean readOnly(Map<String, String> general) {
        for (String key : new String[] {"readonly", "ro"}) {
            if (general.containsKey(key)) return general.get(key) == null || Boolean.parseBoolean(general.get(key));
        }
        return false;
    }

    private static ExportTuning tuning(BackendOptions o, java.util.Set<Backend.Trait> traits) {
        ExportTuning defaults = ExportTuning.defaultsFor(traits);
        String scheduler = o.choice("scheduler", "none", "none", "sorted");
        return new ExportTuning(intSize(o, "split", defaults.splitThreshold()), intSize(o, "chunk", defaults.chunkSize()),
            intSize(o, "streams", defaults.streams()),
            scheduler.equals("sorted") ? BatchScheduler.Policy.SORTED : BatchScheduler.Policy.NONE);
    }

    private static int intSize(BackendOptions o, String key, int fallback) {
        long v = o.size(key, fallback);
        if (v > Integer.MAX_VALUE) throw new IllegalArgumentException(key + "=" + o.asMap().get(key) + " is too large");
        return (int) v;
    }

    /** Parses sizes like {@code 4096}, {@code 64K}, {@code 1G}, {@code 2T} (binary multiples). */
    public static long parseSize(String s) {
        return BackendOptions.parseSize(s);
    }

    /** Opens the export this spec names. */
    public Export openExport() throws IOException {
        return new Export(name, description, open(), tuning, access);
    }

    /** The traits of the opened chain, known before it is opened: the backend's that every filter keeps. */
    public java.util.Set<Backend.Trait> traits() {
        return filters.traits(BackendFactories.of(kind).traits(target, options));
    }

    /** {@code delay(read 5ms) -> error(EIO 10%) -> file:/img}: the chain a request meets, for {@code jnbd serve --check}. */
    public String describeStack() {
        StringBuilder b = new StringBuilder(filters.describe()).append(kind).append(':').append(target);
        if (!options.asMap().isEmpty()) {
            List<String> o = new ArrayList<>();
            options.asMap().forEach((k, v) -> o.add(v == null ? k : k + "=" + v));
            b.append(" (").append(String.join(", ", o)).append(')');
        }
        return b.toString();
    }

    /** Opens the backend this spec names, with its filters in front. */
    public Backend open() throws IOException {
        Backend b = openBackend();
        try {
            return filters.wrap(b);
        } catch (IOException | RuntimeException e) {
            b.close();
            throw e;
        }
    }

    /** The backend this spec names, without its filters (read-only when no filter of theirs writes to it). */
    public Backend openBackend() throws IOException {
        return BackendFactories.of(kind).open(target, options, filters.opensBaseReadOnly());
    }

    /** The chain of this spec's filters in front of {@code backend}, already open (a reload that changed only filters). */
    public Backend wrap(Backend backend) throws IOException {
        return filters.wrap(backend);
    }
}
