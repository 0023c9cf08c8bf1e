package io.jnbd.cli;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.ServerTls;
import java.io.IOException;
import java.net.SocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import org.slf4j.LoggerFactory;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.OptionSpec;

/**
 * What {@code jnbd serve} runs with: each setting from the command line, else the config file, else its
 * default. Every serve option is a setting, its key the long name without the dashes, found through picocli's
 * model of {@link ServeCommand}: a new option needs nothing here, unless its Java type is not check enough,
 * and then it is one line of {@link SettingChecks}. The exports merge by name, the command line's winning.
 */
final class ServeSettings {

    /** Options that say what to do with the settings rather than being one. */
    private static final Set<String> NOT_SETTINGS = Set.of("config", "check", "help", "version");

    /** What a reload applies; every other setting takes a restart. data-dir only places the default export. */
    static final Set<String> RELOADABLE = Set.of("export", "default-export", "data-dir");

    /** A setting's value (null: not set) and where it came from: {@code default}, {@code command line} or {@code FILE:LINE}. */
    record Value(Object value, String origin) {}

    private static final String DEFAULT = "default", COMMAND_LINE = "command line";

    private final Path file;
    private final Map<String, Value> values;
    private final Map<String, Value> exports;

    private ServeSettings(Path file, Map<String, Value> values, Map<String, Value> exports) {
        this.file = file;
        this.values = values;
        this.exports = exports;
    }

    /**
     * The settings of {@code serve} (its command line as parsed) with those of {@code file} (may be null), read
     * now; the option fields of the command are left as the command line set them, so a reload resolves again.
     */
    static ServeSettings resolve(CommandSpec serve, Path file) {
        ConfigFile config = file == null ? null : read(file);
        Map<String, ConfigFile.Setting> fromFile = new LinkedHashMap<>();
        if (config != null) {
            for (ConfigFile.Setting s : config.settings()) {
                OptionSpec o = serve.findOption("--" + s.key());
                if (s.key().equals("export")) throw located(file, s.line(), "export", "expected a table of NAME = \"SPEC\" ([export])");
                if (o == null || NOT_SETTINGS.contains(s.key()) || s.key().length() == 1) {
                    throw located(file, s.line(), s.key(), "unknown setting (the keys are jnbd serve's long options without the dashes)");
                }
                fromFile.put(s.key(), s);
            }
            if (config.oldFormat()) {
                LoggerFactory.getLogger(ServeSettings.class).warn("{} is in jnbd's old KEY = VALUE format, which is still read; "
                    + "'jnbd serve --config {} --check' prints it as TOML, the format to use (docs/server.md)", file, file);
            }
        }
        var parsed = serve.commandLine().getParseResult();
        Map<String, Value> values = new LinkedHashMap<>();
        for (OptionSpec o : serve.options()) {
            String key = o.longestName().substring(2);
            if (NOT_SETTINGS.contains(key) || key.equals("export")) continue;
            ConfigFile.Setting s = fromFile.get(key);
            Value v;
            if (parsed != null && parsed.hasMatchedOption(o)) v = new Value(copy(o.getValue()), COMMAND_LINE);
            else if (s != null) v = new Value(convert(s, o, file), file + ":" + s.line());
            else v = new Value(copy(o.getValue()), DEFAULT);
            SettingChecks.check(key, v.value()).ifPresent(message -> {
                throw wrong(key, v, message);
            });
            values.put(key, v);
        }
        Map<String, Value> exports = exports(serve, config, values);
        ServeSettings settings = new ServeSettings(file, values, exports);
        settings.checkTogether();
        return settings;
    }

    private static ConfigFile read(Path file) {
        try {
            return ConfigFile.read(file);
        } catch (NoSuchFileException e) {
            throw new ConfigException("no such config file " + file);
        } catch (IOException e) {
            throw new ConfigException("cannot read config file " + file + ": " + e.getMessage());
        }
    }

    private static Object copy(Object value) {
        return value instanceof List<?> l ? List.copyOf(l) : value;
    }

    // ---------------------------------------------------------------- values from the file

    /** The file's TOML value as the option's Java type. */
    private static Object convert(ConfigFile.Setting s, OptionSpec o, Path file) {
        Object v = s.value();
        if (o.isMultiValue()) {
            List<Object> out = new ArrayList<>();
            for (Object item : v instanceof List<?> l ? l : List.of(v)) out.add(scalar(item, o.auxiliaryTypes()[0], s, file));
            return List.copyOf(out);
        }
        return scalar(v, o.type(), s, file);
    }

    private static Object scalar(Object v, Class<?> type, ConfigFile.Setting s, Path file) {
        Object out = null;
        if (type == int.class || type == Integer.class) {
            if (v instanceof Long n && n == n.intValue()) out = n.intValue();
        } else if (type == long.class || type == Long.class) {
            if (v instanceof Long n) out = n;
        } else if (type == boolean.class || type == Boolean.class) {
            if (v instanceof Boolean b) out = b;
        } else if (type == String.class) {
            if (v instanceof String text) out = text;
        } else if (type == Path.class) {
            if (v instanceof String p && !p.isEmpty()) out = Path.of(p);
        }
        if (out == null) throw located(file, s.line(), s.key(), "expected " + SettingChecks.expected(s.key(), type) + ", got " + TomlText.literal(v));
        return out;
    }

    // ---------------------------------------------------------------- exports

    /** The file's exports, then the command line's (which replace the file's of the same name); else the default one. */
    private static Map<String, Value> exports(CommandSpec serve, ConfigFile config, Map<String, Value> values) {
        Map<String, Value> exports = new LinkedHashMap<>();
        if (config != null) {
            for (ConfigFile.ExportEntry x : config.exports()) {
                String where = config.path() + ":" + x.line();
                ExportSpec spec;
                try {
                    spec = TomlExport.spec(x.name(), x.value());
                } catch (IllegalArgumentException e) {
                    throw new ConfigException(where + ": " + e.getMessage(), true);
                }
                if (exports.put(x.name(), new Value(spec, where)) != null) {
                    throw new ConfigException(where + ": export '" + x.name() + "' is named twice", true);
                }
            }
        }
        @SuppressWarnings("unchecked")
        List<String> given = (List<String>) serve.findOption("--export").getValue();
        for (String text : given) {
            try {
                ExportSpec spec = ExportSpec.parse(text);
                exports.put(spec.name(), new Value(spec, COMMAND_LINE));
            } catch (IllegalArgumentException e) {
                throw new ConfigException(e.getMessage());
            }
        }
        if (exports.isEmpty()) {
            Path image = ((Path) values.get("data-dir").value()).resolve("default.img").toAbsolutePath();
            exports.put("default", new Value(ExportSpec.parse("default", "file:" + image + ",size=1G"), DEFAULT));
        }
        return exports;
    }

    /** Settings that are good alone and not together. */
    private void checkTogether() {
        String name = string("default-export");
        if (name != null && !exports.containsKey(name) && !name.endsWith("/status")) {
            throw wrong("default-export", values.get("default-export"), "'" + name + "' is not one of the exports ("
                + String.join(", ", exports.keySet()) + ")");
        }
        try {
            tls().check();
        } catch (IllegalArgumentException e) {
            throw wrong("tls", values.get("tls"), e.getMessage());
        }
    }

    /** The message for a bad value, naming where it came from. */
    private static ConfigException wrong(String key, Value v, String message) {
        if (v.origin().equals(COMMAND_LINE) || v.origin().equals(DEFAULT)) return new ConfigException("--" + key + ": " + message);
        return new ConfigException(v.origin() + ": " + key + ": " + message, true);
    }

    private static ConfigException located(Path file, int line, String key, String message) {
        return new ConfigException(file + ":" + line + ": " + key + ": " + message, true);
    }

    // ---------------------------------------------------------------- what the server is built from

    Path file() {
        return file;
    }

    private Object get(String key) {
        Value v = values.get(key);
        if (v == null) throw new IllegalStateException("jnbd serve has no option --" + key);
        return v.value();
    }

    int integer(String key) {
        return (Integer) get(key);
    }

    String string(String key) {
        return (String) get(key);
    }

    Path path(String key) {
        return (Path) get(key);
    }

    boolean flag(String key) {
        return Boolean.TRUE.equals(get(key));
    }

    List<ExportSpec> exports() {
        return exports.values().stream().map(v -> (ExportSpec) v.value()).toList();
    }

    /** The listeners: every listen and unix; with neither, the NBD port on loopback. */
    @SuppressWarnings("unchecked")
    List<SocketAddress> addresses() {
        List<SocketAddress> out = new ArrayList<>();
        for (String hostPort : (List<String>) get("listen")) out.add(SettingChecks.parseHostPort(hostPort));
        for (Path p : (List<Path>) get("unix")) out.add(UnixDomainSocketAddress.of(p));
        if (out.isEmpty()) out.add(SettingChecks.parseHostPort("127.0.0.1:" + Nbd.DEFAULT_PORT));
        return out;
    }

    TlsChoice tls() {
        return new TlsChoice(ServerTls.parseMode(string("tls")), path("tls-certificates"), path("tls-psk"), flag("tls-verify-peer"));
    }

    ServerConfig serverConfig() {
        Integer backlog = (Integer) get("backlog");
        return ServerConfig.defaults()
            .withHandshakeTimeout(Duration.ofSeconds(integer("handshake-timeout")))
            .withRequestsInFlight(integer("requests-in-flight"))
            .withSendTimeout(Duration.ofSeconds(integer("send-timeout")))
            .withIoThreads(integer("io-threads"))
            .withBusyPoll(Duration.ofNanos(integer("busy-poll") * 1000L))
            .withSendBuffer(SettingChecks.parseSendBuffer(string("send-buffer")))
            .withBufferBudget(ExportSpec.parseSize(string("buffer-memory")))
            .withReceiveTimeout(Duration.ofSeconds(integer("receive-timeout")))
            .withBacklog(backlog != null ? backlog : 0)
            .withMaxConnections(integer("max-connections"))
            .withOperatorSlots(integer("operator-slots"));
    }

    /** The settings that differ from {@code running} and that only a restart would apply. */
    List<String> restartNeeded(ServeSettings running) {
        List<String> out = new ArrayList<>();
        for (var e : values.entrySet()) {
            if (RELOADABLE.contains(e.getKey())) continue;
            if (!Objects.equals(e.getValue().value(), running.values.get(e.getKey()).value())) out.add(e.getKey());
        }
        return out;
    }

    /** The settings as a config file that gives them back, each line saying where its value came from. */
    String toToml() {
        StringBuilder b = new StringBuilder();
        b.append("# jnbd serve's settings: the command line, then ").append(file == null ? "no config file" : file)
            .append(", then the defaults.\n")
            .append("# A reload (SIGHUP) applies ").append(String.join(", ", RELOADABLE.stream().sorted().toList()))
            .append("; every other setting takes a restart.\n");
        values.forEach((key, v) -> {
            if (v.value() == null) b.append("# ").append(key).append(" is not set\n");
            else b.append(key).append(" = ").append(TomlText.literal(v.value())).append("  # ").append(v.origin()).append('\n');
        });
        List<String> stacks = new ArrayList<>();
        exports.forEach((name, v) -> {
            ExportSpec spec = (ExportSpec) v.value();
            if (!spec.filters().isEmpty()) stacks.add("#   " + name + ": " + spec.describeStack() + "\n");
        });
        if (!stacks.isEmpty()) b.append("\n# Filter stacks, in the order a request meets them:\n").append(String.join("", stacks));
        b.append("\n[export]\n");
        StringBuilder tables = new StringBuilder();
        exports.forEach((name, v) -> {
            ExportSpec spec = (ExportSpec) v.value();
            if (readsBack(spec)) {
                b.append(TomlText.key(name)).append(" = ").append(TomlText.literal(spec.text())).append("  # ").append(v.origin()).append('\n');
            } else {
                tables.append("\n# ").append(v.origin()).append('\n').append(TomlExport.table(spec));
            }
        });
        return b.append(tables).toString();
    }

    /** Whether the one-line spec of {@code spec} gives it back: not when its target or an option holds a comma. */
    private static boolean readsBack(ExportSpec spec) {
        try {
            return ExportSpec.parse(spec.name(), spec.text()).equals(spec);
        } catch (IllegalArgumentException e) {
            return false;
        }
    }
}
