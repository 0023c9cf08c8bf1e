package io.jnbd.server.filter;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.FilterFactory;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.Set;

/**
 * {@code filter=error}: nbdkit's error filter, with its keys: {@code error=}, {@code error-rate=},
 * {@code error-file=} for every command, and {@code error-pread=}, {@code error-pread-rate=},
 * {@code error-pread-file=} and so on for one (pread, pwrite, trim, zero, extents, cache). jnbd adds the
 * {@code error-flush} keys, {@code error-offset=} and {@code error-length=} (only requests that touch that range
 * fail, so a test can fail exactly one) and {@code error-seed=} (the same errors on every run).
 */
public final class ErrorFilterFactory implements FilterFactory {
    private static final int[] ERRORS = {Nbd.EPERM, Nbd.EIO, Nbd.ENOMEM, Nbd.EINVAL, Nbd.ENOSPC, Nbd.EOVERFLOW, Nbd.ENOTSUP, Nbd.ESHUTDOWN};

    @Override public String name() { return "error"; }

    @Override
    public String usage() {
        return "filter=error[,error=EIO|ENOSPC|...][,error-rate=N%|0..1|1:N][,error-file=PATH]"
            + "[,error-COMMAND[-rate|-file]=...][,error-offset=SIZE][,error-length=SIZE][,error-seed=N]";
    }

    @Override
    public Set<String> options() {
        Set<String> keys = new LinkedHashSet<>(List.of("error", "error-rate", "error-file"));
        for (Command c : Command.values()) {
            keys.add(key(c, ""));
            keys.add(key(c, "-rate"));
            keys.add(key(c, "-file"));
        }
        keys.addAll(List.of("error-offset", "error-length", "error-seed"));
        return keys;
    }

    private static String key(Command c, String suffix) {
        return "error-" + c.errorWord + suffix;
    }

    @Override
    public void check(BackendOptions options) {
        config(options);
    }

    @Override
    public String describe(BackendOptions options) {
        return "error(" + config(options).describe() + ")";
    }

    /** Those it keeps work as its own calls do: the asynchronous calls fail too; sendfile and never-blocking do not. */
    @Override
    public Set<Backend.Trait> traits(Set<Backend.Trait> below) {
        return Traits.throughEveryCall(below);
    }

    /**
     * A filter that fails no read keeps sendfile (the reads it skips would have passed through), and one that looks
     * for no file never waits; one that fails nothing keeps everything.
     */
    @Override
    public Set<Backend.Trait> traits(BackendOptions options, Set<Backend.Trait> below) {
        ErrorFilter.Config c = config(options);
        boolean failsAny = c.rules().values().stream().anyMatch(r -> r.rate() > 0);
        ErrorFilter.Rule read = c.rules().get(Command.READ);
        boolean waits = c.rules().values().stream().anyMatch(r -> r.rate() > 0 && r.file() != null);
        return Traits.through(below, failsAny, read.rate() > 0, waits);
    }

    @Override
    public io.jnbd.server.backend.FilterBackend wrap(Backend inner, BackendOptions options) {
        return new ErrorFilter(inner, config(options), traits(options, inner.traits()));
    }

    /** What the filter fails, read from its keys: a command's own key wins over the one for every command. */
    static ErrorFilter.Config config(BackendOptions o) {
        int error = error(o, "error", Nbd.EIO);
        double rate = rate(o, "error-rate", 0);
        Path file = file(o, "error-file");
        EnumMap<Command, ErrorFilter.Rule> rules = new EnumMap<>(Command.class);
        for (Command c : Command.values()) {
            rules.put(c, new ErrorFilter.Rule(error(o, key(c, ""), error), rate(o, key(c, "-rate"), rate),
                o.has(key(c, "-file")) ? file(o, key(c, "-file")) : file));
        }
        long offset = o.size("error-offset", 0);
        long length = o.has("error-length") ? o.size("error-length", 0) : Long.MAX_VALUE - offset;
        if (o.has("error-length") && length == 0) throw new IllegalArgumentException("error-length=0 would fail nothing; give a length of at least 1");
        if (length > Long.MAX_VALUE - offset) throw new IllegalArgumentException("error-offset= plus error-length= is past the largest size");
        boolean ranged = o.has("error-offset") || o.has("error-length");
        Random random = o.has("error-seed") ? new Random(seed(o)) : null;
        return new ErrorFilter.Config(rules, ranged, offset, offset + length, random);
    }

    private static int error(BackendOptions o, String key, int fallback) {
        String v = o.string(key, null);
        if (v == null) return fallback;
        String name = v.strip().toUpperCase(Locale.ROOT);
        List<String> names = new ArrayList<>();
        for (int e : ERRORS) {
            if (Nbd.errorName(e).equals(name)) return e;
            names.add(Nbd.errorName(e));
        }
        throw new IllegalArgumentException(key + "=" + v + " is not an NBD error (" + String.join(", ", names) + ")");
    }

    /** A probability as nbdkit writes one: {@code 10%}, {@code 0.1} or {@code 1:10}. */
    static double rate(BackendOptions o, String key, double fallback) {
        String v = o.string(key, null);
        if (v == null) return fallback;
        String t = v.strip();
        double r;
        try {
            if (t.endsWith("%")) {
                r = Double.parseDouble(t.substring(0, t.length() - 1)) / 100;
            } else if (t.contains(":")) {
                String[] nd = t.split(":", 2);
                r = Double.parseDouble(nd[0]) / Double.parseDouble(nd[1]);
            } else {
                r = Double.parseDouble(t);
            }
        } catch (NumberFormatException e) {
            r = Double.NaN;
        }
        if (!(r >= 0 && r <= 1)) throw new IllegalArgumentException(key + "=" + v + " is not a rate from 0 to 1 (10%, 0.1 or 1:10)");
        return r;
    }

    private static Path file(BackendOptions o, String key) {
        String v = o.string(key, null);
        return v == null ? null : Path.of(v);
    }

    private static long seed(BackendOptions o) {
        String v = o.string("error-seed", null);
        try {
            return Long.parseLong(v.strip());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("error-seed=" + v + " is not a whole number");
        }
    }
}
