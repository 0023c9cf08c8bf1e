package io.jnbd.server.backend;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/**
 * The kind-specific options of an export spec, {@code key=value} or a bare {@code key}, with readers that
 * fail with one line a user understands.
 */
public final class BackendOptions {
    private final Map<String, String> values;

    public BackendOptions(Map<String, String> values) {
        this.values = Collections.unmodifiableMap(new LinkedHashMap<>(values));
    }

    public static BackendOptions none() {
        return new BackendOptions(Map.of());
    }

    public Map<String, String> asMap() {
        return values;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof BackendOptions other && values.equals(other.values);
    }

    @Override
    public int hashCode() {
        return values.hashCode();
    }

    public boolean has(String key) {
        return values.containsKey(key);
    }

    /** The value of {@code key}, or {@code fallback} when absent; a key given without a value is an error. */
    public String string(String key, String fallback) {
        if (!values.containsKey(key)) return fallback;
        String v = values.get(key);
        if (v == null || v.isEmpty()) throw new IllegalArgumentException(key + "= needs a value");
        return v;
    }

    /** A size such as 64M, or {@code fallback} when absent. */
    public long size(String key, long fallback) {
        String v = string(key, null);
        return v == null ? fallback : parseSize(v);
    }

    /** A whole number from {@code min} to {@code max}, or {@code fallback} when absent. */
    public int integer(String key, int min, int max, int fallback) {
        String v = string(key, null);
        if (v == null) return fallback;
        try {
            int n = Integer.parseInt(v.strip());
            if (n >= min && n <= max) return n;
        } catch (NumberFormatException e) {
            // the message below says what is wanted
        }
        throw new IllegalArgumentException(key + " must be a whole number from " + min + " to " + max + ", not '" + v + "'");
    }

    /** One of {@code allowed} (case-insensitive), or {@code fallback} when absent. */
    public String choice(String key, String fallback, String... allowed) {
        String v = string(key, null);
        if (v == null) return fallback;
        for (String a : allowed) {
            if (a.equalsIgnoreCase(v)) return a;
        }
        throw new IllegalArgumentException(key + " must be " + String.join(" or ", allowed) + ", not '" + v + "'");
    }

    /** Parses sizes like {@code 4096}, {@code 64K}, {@code 1G}, {@code 2T} (binary multiples). */
    public static long parseSize(String s) {
        if (s == null || s.isEmpty()) throw new IllegalArgumentException("missing size");
        String t = s.trim().toUpperCase(Locale.ROOT);
        if (t.endsWith("IB")) t = t.substring(0, t.length() - 2);
        else if (t.endsWith("B") && t.length() > 1 && !Character.isDigit(t.charAt(t.length() - 2))) t = t.substring(0, t.length() - 1);
        if (t.isEmpty()) throw new IllegalArgumentException("'" + s + "' is not a size (examples: 4096, 64M, 1G)");
        int shift = 0;
        char last = t.charAt(t.length() - 1);
        switch (last) {
            case 'K' -> shift = 10;
            case 'M' -> shift = 20;
            case 'G' -> shift = 30;
            case 'T' -> shift = 40;
            case 'P' -> shift = 50;
            default -> { }
        }
        if (shift != 0) t = t.substring(0, t.length() - 1);
        try {
            long v = Long.parseLong(t);
            if (v < 0 || (shift > 0 && v > (Long.MAX_VALUE >> shift))) throw new NumberFormatException();
            return v << shift;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("'" + s + "' is not a size (examples: 4096, 64M, 1G)");
        }
    }
}
