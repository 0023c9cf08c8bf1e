package io.jnbd.cli;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.BackendFactories;
import java.util.AbstractMap.SimpleEntry;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * An export of the config file: {@code NAME = "SPEC"} as {@code --export} takes it, or a table of the spec's
 * parts, whose values keep their commas:
 *
 * <pre>
 * [export.disk]
 * file = "/var/lib/vm.img"          # the backend: file, memory or pool (a list of servers) and its target
 * mode = "direct"                   # every other option as in the spec
 * readonly = true
 * allow = ["10.0.0.0/8", "alice"]   # an option given more than once: a list
 * filter = ["delay", "error"]       # filters, outermost first, each with its keys
 * delay-read = "5ms"
 * error-rate = 0.1
 * description = "VM disk, primary"
 * </pre>
 */
final class TomlExport {
    private TomlExport() {}

    /** The spec of export {@code name}; the message of the exception is meant for the user. */
    static ExportSpec spec(String name, Object value) {
        if (value instanceof String text) return ExportSpec.parse(name, text);
        if (!(value instanceof Map<?, ?> parts)) {
            throw new IllegalArgumentException("export '" + name + "': expected \"KIND:TARGET,OPTIONS\" or a table, got " + TomlText.literal(value));
        }
        String kind = null, target = null, description = "";
        List<Map.Entry<String, String>> options = new ArrayList<>();
        for (var e : parts.entrySet()) {
            String key = (String) e.getKey();
            Object v = e.getValue();
            if (BackendFactories.of(key) != null) {
                if (kind != null) throw new IllegalArgumentException("export '" + name + "': both " + kind + " and " + key);
                kind = key;
                target = v instanceof List<?> l ? String.join(",", l.stream().map(i -> text(name, key, i)).toList()) : text(name, key, v);
            } else if (key.equals("description")) {
                description = text(name, key, v);
            } else if (v instanceof List<?> l) {
                for (Object item : l) options.add(new SimpleEntry<>(key, text(name, key, item)));
            } else if (v instanceof Boolean b) {
                options.add(new SimpleEntry<>(key, b ? null : "false")); // readonly = true is the bare flag
            } else {
                options.add(new SimpleEntry<>(key, text(name, key, v)));
            }
        }
        if (kind == null) {
            throw new IllegalArgumentException("export '" + name + "': no backend: add file = \"PATH\", memory = \"SIZE\" "
                + "or another kind (" + BackendFactories.kindList() + ")");
        }
        return ExportSpec.of(name, kind, target, options, description);
    }

    /** {@code spec} as a table of its parts, for one whose target or options hold commas. */
    static String table(ExportSpec spec) {
        StringBuilder b = new StringBuilder("[export.").append(TomlText.key(spec.name())).append("]\n");
        b.append(spec.kind()).append(" = ").append(TomlText.literal(spec.target())).append('\n');
        Map<String, List<String>> byKey = new java.util.LinkedHashMap<>();
        for (var p : spec.parts()) byKey.computeIfAbsent(p.getKey(), k -> new ArrayList<>()).add(p.getValue());
        byKey.forEach((key, values) -> {
            b.append(TomlText.key(key)).append(" = ");
            if (values.size() > 1) b.append(TomlText.literal(values));
            else b.append(values.getFirst() == null ? "true" : TomlText.literal(values.getFirst()));
            b.append('\n');
        });
        if (!spec.description().isEmpty()) b.append("description = ").append(TomlText.literal(spec.description())).append('\n');
        return b.toString();
    }

    private static String text(String name, String key, Object v) {
        if (v instanceof String || v instanceof Long || v instanceof Double) return v.toString();
        throw new IllegalArgumentException("export '" + name + "': " + key + ": expected text or a number, got " + TomlText.literal(v));
    }
}
