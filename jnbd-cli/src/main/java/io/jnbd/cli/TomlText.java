package io.jnbd.cli;

import java.nio.file.Path;
import java.util.List;
import java.util.stream.Collectors;

/** Values written as TOML: what {@code jnbd serve --check} prints and messages quote. */
final class TomlText {
    private TomlText() {}

    static String literal(Object v) {
        if (v instanceof String || v instanceof Path) return quoted(v.toString());
        if (v instanceof List<?> l) return l.stream().map(TomlText::literal).collect(Collectors.joining(", ", "[", "]"));
        if (v instanceof java.util.Map<?, ?>) return "a table";
        return String.valueOf(v);
    }

    /** A key, quoted unless it is a bare key. */
    static String key(String k) {
        return k.matches("[A-Za-z0-9_-]+") ? k : quoted(k);
    }

    private static String quoted(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\t' -> b.append("\\t");
                case '\r' -> b.append("\\r");
                default -> {
                    if (c < 0x20 || c == 0x7f) b.append(String.format("\\u%04X", (int) c));
                    else b.append(c);
                }
            }
        }
        return b.append('"').toString();
    }
}
