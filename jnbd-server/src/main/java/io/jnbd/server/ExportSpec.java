package io.jnbd.server;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendFactories;
import io.jnbd.server.backend.BackendFactory;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.ReadOnlyFilter;
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
 * commas; every other option belongs to the kind, whose {@link BackendFactory} checks it.
 */
public record ExportSpec(String name, String kind, String target, BackendOptions options, boolean readOnly,
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
        if (name.isEmpty() || name.getBytes(java.nio.charset.StandardCharsets.UTF_8).length > 4096) {
            throw new IllegalArgumentException("export name must be 1 to 4096 bytes");
        }
        String where = "export '" + name + "': ";
        try {
            return parse(name, spec, where);
        } catch (IllegalArgumentException e) {
            throw e.getMessage().startsWith(where) ? e : new IllegalArgumentException(where + e.getMessage());
        }
    }

    private static ExportSpec parse(String name, String spec, String where) {
        int colon = spec.indexOf(':');
        if (colon <= 0) throw new IllegalArgumentException("'" + spec + "' does not start with " + BackendFactories.kindList());
        String kind = spec.substring(0, colon).toLowerCase(Locale.ROOT);
        BackendFactory factory = BackendFactories.of(kind);
        if (factory == null) {
            throw new IllegalArgumentException("unknown backend '" + kind + "' (use " + BackendFactories.kindList() + ")");
        }
        String rest = spec.substring(colon + 1);
        String description = "";
        int d = rest.indexOf(",description=");
        if (d >= 0) {
            description = rest.substring(d + ",description=".length());
            rest = rest.substring(0, d);
        }
        String[] parts = rest.split(",", -1);
        String target = parts[0];
        Map<String, String> general = new LinkedHashMap<>(), own = new LinkedHashMap<>();
        List<String> allow = new ArrayList<>(), readOnlyFor = new ArrayList<>();
        for (int i = 1; i < parts.length; i++) {
            String opt = parts[i];
            int e = opt.indexOf('=');
            String key = e < 0 ? opt : opt.substring(0, e);
            String value = e < 0 ? null : opt.substring(e + 1);
            switch (key) {
                case "readonly", "ro", "split", "chunk", "streams", "scheduler" -> general.put(key, value);
                case "allow" -> allow.add(value);
                case "readonly-for" -> readOnlyFor.add(value);
                default -> {
                    if (value == null && own.isEmpty() && factory.continuesTarget(key)) {
                        target += "," + key;
                        continue;
                    }
                    if (!factory.options().contains(key)) {
                        throw new IllegalArgumentException("unknown option '" + key + "' for a " + kind + ": export");
                    }
                    own.put(key, value);
                }
            }
        }
        BackendOptions options = new BackendOptions(own);
        factory.check(target, options);
        boolean readOnly = readOnly(general);
        return new ExportSpec(name, kind, target, options, readOnly, description,
            tuning(new BackendOptions(general), factory.traits(target, options)), AllowList.parse(allow, readOnlyFor));
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

    /** Opens the backend this spec names, with its filters in front. */
    public Backend open() throws IOException {
        Backend b = BackendFactories.of(kind).open(target, options, readOnly);
        return readOnly ? new ReadOnlyFilter(b) : b;
    }
}
