package io.jnbd.cli;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.ServerTls;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.Predicate;

/**
 * What a serve setting's value must be beyond its Java type, one line per option in {@link #CHECKS}, checked on
 * the command line's values and the config file's alike. An option without a line is checked by its type only.
 */
final class SettingChecks {
    private SettingChecks() {}

    /** A constraint on a value, and how a message names what it wants. */
    private record Check(String expected, Predicate<Object> ok) {}

    private static Check range(int min, int max, String expected) {
        return new Check(expected, v -> v instanceof Integer n && n >= min && n <= max);
    }

    private static final Check POSITIVE = range(1, Integer.MAX_VALUE, "a positive integer");
    private static final Check NOT_NEGATIVE = range(0, Integer.MAX_VALUE, "an integer of 0 or more");

    private static final Map<String, Check> CHECKS = Map.ofEntries(
        Map.entry("listen", new Check("HOST:PORT", v -> parses(() -> parseHostPort((String) v)))),
        Map.entry("tls", new Check("off, on or require", v -> parses(() -> ServerTls.parseMode((String) v)))),
        Map.entry("default-export", new Check("an export's name", v -> !((String) v).isEmpty())),
        Map.entry("handshake-timeout", POSITIVE),
        Map.entry("send-timeout", POSITIVE),
        Map.entry("receive-timeout", POSITIVE),
        Map.entry("drain-timeout", NOT_NEGATIVE),
        Map.entry("backlog", POSITIVE),
        Map.entry("max-connections", POSITIVE),
        Map.entry("operator-slots", NOT_NEGATIVE),
        Map.entry("busy-poll", range(0, 10_000, "microseconds from 0 to 10000")),
        Map.entry("send-buffer", new Check("auto, kernel or a size from 4K to 64M", v -> parses(() -> parseSendBuffer((String) v)))),
        Map.entry("requests-in-flight", POSITIVE),
        Map.entry("io-threads", POSITIVE),
        Map.entry("buffer-memory", new Check("a size such as 256M", v -> parses(() -> ExportSpec.parseSize((String) v)))),
        Map.entry("stats-interval", NOT_NEGATIVE),
        Map.entry("metrics", new Check("HOST:PORT of a host this machine resolves", v -> parses(() -> resolvedHostPort((String) v)))));

    /** What a message says {@code key} wants: its check's words, else its Java type's. */
    static String expected(String key, Class<?> type) {
        Check c = CHECKS.get(key);
        if (c != null) return c.expected();
        if (type == int.class || type == Integer.class || type == long.class || type == Long.class) return "an integer";
        if (type == boolean.class || type == Boolean.class) return "true or false";
        if (type == Path.class) return "a path";
        return "text";
    }

    /** What is wrong with {@code value} of {@code key} (with each item of a list), by its line of {@link #CHECKS}. */
    static Optional<String> check(String key, Object value) {
        Check c = CHECKS.get(key);
        if (c == null || value == null) return Optional.empty();
        for (Object item : value instanceof List<?> l ? l : List.of(value)) {
            if (!c.ok().test(item)) return Optional.of("expected " + c.expected() + ", got " + TomlText.literal(item));
        }
        return Optional.empty();
    }

    private static boolean parses(Runnable parse) {
        try {
            parse.run();
            return true;
        } catch (IllegalArgumentException e) {
            return false;
        }
    }

    /** HOST:PORT where HOST is an address or a name that resolves now. */
    static java.net.InetSocketAddress resolvedHostPort(String s) {
        var a = parseHostPort(s);
        if (a.isUnresolved()) throw new IllegalArgumentException("unknown host '" + a.getHostString() + "'");
        return a;
    }

    static java.net.InetSocketAddress parseHostPort(String s) {
        int colon = s.lastIndexOf(':');
        if (colon < 0) throw new IllegalArgumentException("'" + s + "' is not HOST:PORT");
        String host = s.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) host = host.substring(1, host.length() - 1);
        int port;
        try {
            port = Integer.parseInt(s.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("'" + s + "' has no valid port");
        }
        if (port < 0 || port > 65535) throw new IllegalArgumentException("port " + port + " is out of range");
        return new java.net.InetSocketAddress(host.isEmpty() ? "0.0.0.0" : host, port);
    }

    static int parseSendBuffer(String value) {
        switch (value) {
            case "auto" -> { return ServerConfig.SEND_BUFFER_AUTO; }
            case "kernel" -> { return ServerConfig.SEND_BUFFER_KERNEL; }
            default -> {
                long bytes = ExportSpec.parseSize(value);
                if (bytes < 4096 || bytes > 64 << 20) throw new IllegalArgumentException("must be between 4K and 64M, not " + value);
                return (int) bytes;
            }
        }
    }
}
