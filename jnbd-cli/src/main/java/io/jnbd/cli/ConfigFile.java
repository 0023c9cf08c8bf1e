package io.jnbd.cli;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.tomlj.Toml;
import org.tomlj.TomlArray;
import org.tomlj.TomlParseError;
import org.tomlj.TomlParseResult;
import org.tomlj.TomlTable;

/**
 * A {@code jnbd serve --config} file as read, each setting with its line; {@link ServeSettings} gives them
 * meaning. The file is TOML (docs/decisions/0008-config-format.md): a key is one of serve's long options without
 * the dashes ({@code backlog = 4096} is {@code --backlog 4096}), and the exports are the table {@code [export]}
 * of {@code NAME = "SPEC"} or, per export, a table of the spec's parts:
 *
 * <pre>
 * listen = ["127.0.0.1:10809"]
 * backlog = 4096
 * [export]
 * scratch = "memory:4G,description=Scratch space"
 * [export.disk]
 * file = "/var/lib/vm.img"
 * mode = "direct"
 * allow = ["10.0.0.0/8", "alice"]
 * </pre>
 *
 * Values are TOML's as tomlj gives them (String, Long, Boolean, Double), a List of them, or for an export's
 * parts a Map. jnbd's first format, {@code key = value} lines with {@code export NAME = SPEC}, is still read
 * ({@link #oldFormat}) when the file is not TOML and has none of TOML's own syntax.
 */
record ConfigFile(Path path, List<Setting> settings, List<ExportEntry> exports, boolean oldFormat) {

    /** {@code key = value} at {@code line}. */
    record Setting(String key, Object value, int line) {}

    /** Export {@code name}: a spec string, or a map of its parts. */
    record ExportEntry(String name, Object value, int line) {}

    static ConfigFile read(Path path) throws IOException {
        TomlParseResult toml = Toml.parse(path);
        if (!toml.hasErrors()) return fromToml(path, toml);
        List<String> lines = Files.readAllLines(path);
        if (looksOld(lines)) return fromOldFormat(path, lines);
        TomlParseError first = toml.errors().getFirst();
        int line = first.position().line();
        String text = line >= 1 && line <= lines.size() ? lines.get(line - 1) : "";
        Matcher key = KEY.matcher(text);
        throw new ConfigException(path + ":" + line + ": " + (key.lookingAt() ? key.group(1) + ": " : "")
            + plainer(first.getMessage()), true);
    }

    private static final Pattern KEY = Pattern.compile("\\s*([A-Za-z0-9_.\"-]+)\\s*=");

    /** tomlj lists every kind of value it would have taken; what a user got wrong is nearly always a missing quote. */
    private static String plainer(String message) {
        if (message.startsWith("Unexpected") && message.contains("expected ', \"")) {
            return message.substring(0, message.indexOf(", expected")) + ": not a TOML value (text needs quotes, lists brackets)";
        }
        return message;
    }

    private static ConfigFile fromToml(Path path, TomlParseResult toml) {
        List<Setting> settings = new ArrayList<>();
        List<ExportEntry> exports = new ArrayList<>();
        for (var e : toml.entrySet()) {
            int line = toml.inputPositionOf(List.of(e.getKey())).line();
            if (e.getKey().equals("export") && e.getValue() instanceof TomlTable table) {
                for (var x : table.entrySet()) {
                    exports.add(new ExportEntry(x.getKey(), plain(x.getValue()), table.inputPositionOf(List.of(x.getKey())).line()));
                }
            } else {
                settings.add(new Setting(e.getKey(), plain(e.getValue()), line));
            }
        }
        settings.sort(java.util.Comparator.comparingInt(Setting::line));
        exports.sort(java.util.Comparator.comparingInt(ExportEntry::line));
        return new ConfigFile(path, settings, exports, false);
    }

    /** tomlj's arrays and tables as Java lists and maps. */
    private static Object plain(Object v) {
        if (v instanceof TomlArray a) {
            List<Object> out = new ArrayList<>();
            for (int i = 0; i < a.size(); i++) out.add(plain(a.get(i)));
            return out;
        }
        if (v instanceof TomlTable t) {
            Map<String, Object> out = new LinkedHashMap<>();
            for (var e : t.entrySet()) out.put(e.getKey(), plain(e.getValue()));
            return out;
        }
        return v;
    }

    // ---------------------------------------------------------------- jnbd's first format

    private static final Pattern OLD_LINE = Pattern.compile("([A-Za-z][A-Za-z0-9-]*)(?:\\s+([^=\\s][^=]*?))?\\s*=\\s*(.*)");

    /** An IPv6 listener, {@code [::1]:10809}: the one value of the first format that starts with a bracket. */
    private static final Pattern IPV6_HOST_PORT = Pattern.compile("\\[[0-9A-Fa-f:.%]+]:[0-9]+");

    /**
     * Every line a comment or {@code key = value} (or {@code export NAME = SPEC}) whose value has none of TOML's
     * syntax: no quotes, no table, no list. Then the file was written for the first format, not mistyped TOML.
     */
    private static boolean looksOld(List<String> lines) {
        for (String raw : lines) {
            String line = raw.strip();
            if (line.isEmpty() || line.startsWith("#")) continue;
            Matcher m = OLD_LINE.matcher(line);
            if (!m.matches() || m.group(3).isEmpty()) return false;
            String value = m.group(3);
            if ("\"'{".indexOf(value.charAt(0)) >= 0 || value.startsWith("[") && !IPV6_HOST_PORT.matcher(value).matches()) return false;
            if (m.group(2) != null && !m.group(1).equals("export")) return false;
        }
        return true;
    }

    private static ConfigFile fromOldFormat(Path path, List<String> lines) {
        Map<String, Setting> settings = new LinkedHashMap<>();
        List<ExportEntry> exports = new ArrayList<>();
        for (int n = 1; n <= lines.size(); n++) {
            String line = lines.get(n - 1).strip();
            if (line.isEmpty() || line.startsWith("#")) continue;
            Matcher m = OLD_LINE.matcher(line);
            m.matches(); // looksOld said so
            if (m.group(2) != null) {
                exports.add(new ExportEntry(m.group(2), m.group(3), n));
                continue;
            }
            Object value = typed(m.group(3));
            Setting before = settings.get(m.group(1));
            if (before != null) {
                // listen and unix were repeated lines; a repeated single value becomes a list, which its check refuses
                List<Object> all = new ArrayList<>(before.value() instanceof List<?> l ? l : List.of(before.value()));
                all.add(value);
                value = all;
            }
            settings.put(m.group(1), new Setting(m.group(1), value, before != null ? before.line() : n));
        }
        return new ConfigFile(path, List.copyOf(settings.values()), exports, true);
    }

    /** A value of the first format as TOML would have typed it. */
    private static Object typed(String value) {
        if (value.equals("true") || value.equals("false")) return Boolean.parseBoolean(value);
        if (value.matches("-?[0-9]{1,18}")) return Long.parseLong(value);
        return value;
    }
}
