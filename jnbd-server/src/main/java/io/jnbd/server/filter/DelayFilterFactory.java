package io.jnbd.server.filter;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.FilterFactory;
import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * {@code filter=delay}: nbdkit's delay filter, with its keys: {@code delay-read=}, {@code delay-write=},
 * {@code delay-zero=}, {@code delay-trim=}, {@code delay-extents=}, {@code delay-cache=}, the short forms
 * {@code rdelay=} and {@code wdelay=}, and {@code delay-fast-zero=}; jnbd adds {@code delay-flush=}.
 */
public final class DelayFilterFactory implements FilterFactory {
    /** Longer than any test or simulation wants, short enough that a typo (5000 for 5ms) is caught. */
    static final long MAX_NANOS = 3_600_000_000_000L;

    private static final Map<String, Command> SHORT = Map.of("rdelay", Command.READ, "wdelay", Command.WRITE);

    @Override public String name() { return "delay"; }

    @Override
    public String usage() {
        return "filter=delay[,delay-read=DELAY][,delay-write=DELAY][,delay-zero=DELAY][,delay-trim=DELAY]"
            + "[,delay-extents=DELAY][,delay-cache=DELAY][,delay-flush=DELAY][,delay-fast-zero=BOOL]";
    }

    @Override
    public Set<String> options() {
        Set<String> keys = new LinkedHashSet<>();
        for (Command c : Command.values()) keys.add(key(c));
        keys.addAll(SHORT.keySet());
        keys.add("delay-fast-zero");
        return keys;
    }

    static String key(Command c) {
        return "delay-" + c.delayWord;
    }

    @Override
    public void check(BackendOptions options) {
        delays(options);
        fastZeroFails(options);
    }

    @Override
    public String describe(BackendOptions options) {
        List<String> parts = new ArrayList<>();
        delays(options).forEach((c, nanos) -> {
            if (nanos > 0) parts.add(c.delayWord + " " + DelayFilter.text(nanos));
        });
        return "delay(" + (parts.isEmpty() ? "none" : String.join(", ", parts)) + ")";
    }

    /** Those it keeps work as its own calls do: the asynchronous calls wait too; sendfile and never-blocking do not. */
    @Override
    public Set<Backend.Trait> traits(Set<Backend.Trait> below) {
        return Traits.throughEveryCall(below);
    }

    /** With no delay at all it is a pass-through and keeps everything; any delay waits, so it keeps what {@link #traits(Set)} does. */
    @Override
    public Set<Backend.Trait> traits(BackendOptions options, Set<Backend.Trait> below) {
        boolean delays = delays(options).values().stream().anyMatch(n -> n > 0);
        return Traits.through(below, delays, delays, delays);
    }

    @Override
    public io.jnbd.server.backend.FilterBackend wrap(Backend inner, BackendOptions options) {
        return new DelayFilter(inner, delays(options), fastZeroFails(options), describe(options), traits(options, inner.traits()));
    }

    /** The delay of each command in nanoseconds, 0 where none is given. */
    static EnumMap<Command, Long> delays(BackendOptions options) {
        EnumMap<Command, Long> out = new EnumMap<>(Command.class);
        for (Command c : Command.values()) out.put(c, 0L);
        for (Command c : Command.values()) {
            if (options.has(key(c))) out.put(c, parseDelay(key(c), options.string(key(c), null)));
        }
        for (var s : SHORT.entrySet()) {
            if (!options.has(s.getKey())) continue;
            if (options.has(key(s.getValue()))) {
                throw new IllegalArgumentException(s.getKey() + "= and " + key(s.getValue()) + "= are the same key; give one");
            }
            out.put(s.getValue(), parseDelay(s.getKey(), options.string(s.getKey(), null)));
        }
        return out;
    }

    /** nbdkit's default: where zeroes are delayed, a client asking for a fast zero is told at once that it would not be. */
    private static boolean fastZeroFails(BackendOptions options) {
        if (options.has("delay-fast-zero") && options.asMap().get("delay-fast-zero") == null) return true; // TOML's = true
        String v = options.choice("delay-fast-zero", "true", "true", "false", "on", "off", "yes", "no", "1", "0");
        return Set.of("true", "on", "yes", "1").contains(v);
    }

    private static final Pattern DELAY = Pattern.compile("([0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)\\s*(s|ms|us|µs|μs|ns)?");

    /**
     * A delay as nbdkit reads one: seconds ({@code 2}, {@code 1.5}, {@code 1.5s}) or with a unit ({@code 100ms},
     * {@code 500us}, {@code 1000ns}), in nanoseconds.
     */
    static long parseDelay(String key, String value) {
        Matcher m = DELAY.matcher(value.strip());
        if (m.matches()) {
            String unit = m.group(2) == null ? "s" : m.group(2);
            long perUnit = switch (unit) {
                case "s" -> 1_000_000_000L;
                case "ms" -> 1_000_000L;
                case "ns" -> 1L;
                default -> 1_000L;
            };
            BigDecimal nanos = new BigDecimal(m.group(1).startsWith(".") ? "0" + m.group(1) : m.group(1)).multiply(BigDecimal.valueOf(perUnit));
            if (nanos.compareTo(BigDecimal.valueOf(MAX_NANOS)) > 0) {
                throw new IllegalArgumentException(key + "=" + value + " is longer than the longest delay, 1 hour");
            }
            return nanos.longValue();
        }
        throw new IllegalArgumentException(key + "=" + value + " is not a delay (seconds, or with a unit: 2, 1.5s, 10ms, 500us, 1000ns)");
    }
}
