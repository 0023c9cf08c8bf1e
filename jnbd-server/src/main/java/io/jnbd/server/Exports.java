package io.jnbd.server;

import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.NamedViews;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A fixed set of exports by name, as the command line or a config file gives them; the empty name means the
 * default. Each export's {@link AllowList} decides which clients see and open it.
 */
public final class Exports implements ExportRegistry {
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

    @Override
    public Export find(String name) {
        return byName.get(name.isEmpty() ? defaultName : name);
    }

    /**
     * {@inheritDoc} An export whose chain takes names after its own ({@link NamedViews}) is also found as
     * {@code EXPORT/NAME}, and asked whether this client may have that view.
     */
    @Override
    public Export find(String name, Client client) throws Refused {
        Export e = find(name);
        String viewName = null;
        for (int slash = name.indexOf('/'); e == null && slash > 0; slash = name.indexOf('/', slash + 1)) {
            Export prefix = byName.get(name.substring(0, slash));
            if (prefix != null && views(prefix) != null) {
                e = prefix;
                viewName = name.substring(slash + 1);
            }
        }
        if (e != null && !e.access().allows(client)) {
            // Without TLS a client has no identity: if the list names some, TLS may be what it lacks.
            boolean tlsMayAdmit = client.identities().isEmpty() && e.access().admitsIdentities();
            throw new Refused("export '" + e.name() + "' is not open to this client" + (tlsMayAdmit ? " without TLS" : ""), tlsMayAdmit);
        }
        NamedViews views = e == null ? null : views(e);
        if (views != null) {
            String why = views.refusal(viewName, client.identities());
            if (why != null) throw new Refused(why);
        }
        return e;
    }

    private static NamedViews views(Export e) {
        return FilterBackend.find(e.backend(), NamedViews.class);
    }

    @Override
    public Collection<Export> listed(Client client) {
        List<Export> open = new ArrayList<>(byName.size());
        for (Export e : byName.values()) if (e.access().allows(client)) open.add(e);
        return open;
    }

    @Override
    public Collection<Export> all() {
        return byName.values();
    }

    @Override
    public Collection<Export> listed() {
        return byName.values();
    }

    public String defaultName() {
        return defaultName;
    }
}
