package io.jnbd.server;

import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The server's exports by name; the empty name means the default export. */
public final class Exports {
    private final Map<String, Export> byName = new LinkedHashMap<>();
    private final String defaultName;

    public Exports(List<Export> exports, String defaultName) {
        for (Export e : exports) {
            if (byName.putIfAbsent(e.name(), e) != null) throw new IllegalArgumentException("export '" + e.name() + "' is named twice");
        }
        if (exports.isEmpty()) throw new IllegalArgumentException("no exports");
        this.defaultName = defaultName != null ? defaultName : exports.getFirst().name();
        if (!byName.containsKey(this.defaultName)) {
            throw new IllegalArgumentException("default export '" + this.defaultName + "' is not one of the exports");
        }
    }

    public Export find(String name) {
        return byName.get(name.isEmpty() ? defaultName : name);
    }

    public Collection<Export> all() {
        return byName.values();
    }

    public String defaultName() {
        return defaultName;
    }
}
