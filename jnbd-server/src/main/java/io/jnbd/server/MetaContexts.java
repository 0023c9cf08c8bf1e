package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The metadata contexts of one connection's negotiation (NBD spec, "Metadata querying"): what a query names on an
 * export, the ids the contexts get, and which ones the last {@code NBD_OPT_SET_META_CONTEXT} selected.
 *
 * <p>An export answers {@code base:allocation} and the contexts its backend names ({@link
 * io.jnbd.server.backend.Backend#metaContexts}), asked anew at every query since an operator may add or remove one
 * while the server runs. A query that is a context's name matches it. In LIST only, a query ending in a colon
 * ({@code base:}, {@code qemu:}, {@code qemu:dirty-bitmap:}) matches every context whose name begins with it, as
 * qemu-nbd answers; in SET it matches nothing, as the spec advises for an empty leaf-name. Any other query, in an
 * unknown namespace or not, matches nothing and is no error.
 */
final class MetaContexts {
    static final int BASE_ALLOCATION_ID = 1;

    /** A query without a namespace: the spec lets the server refuse the option with {@code NBD_REP_ERR_INVALID}. */
    static final class InvalidQuery extends Exception {
        InvalidQuery(String message) {
            super(message);
        }
    }

    /**
     * Every name given an id on this connection: a context keeps its id across SETs, so a client that selects again
     * sees the same one (the spec lets ids change; keeping them costs nothing and spares a client surprises).
     */
    private final Map<String, Integer> ids = new HashMap<>(Map.of(Nbd.CONTEXT_BASE_ALLOCATION, BASE_ALLOCATION_ID));
    /** The export name the selection was made for, as the client wrote it ({@code boot/pc42}, not {@code boot}). */
    private String selectedName;
    private List<MetaContext> selected = List.of();

    /**
     * The names of the contexts of {@code export} that {@code queries} list; no queries lists them all. The query
     * {@link #IDENTITY} alone also lists {@code jnbd:identity:<hex>} when the backend has an identity: a name to
     * compare, not a context to select (SET never matches it), so a reconnecting client can tell whether it came
     * back to the same data without the protocol growing an option.
     */
    List<String> list(Export export, List<String> queries) throws InvalidQuery {
        checkNamespaces(queries);
        List<String> out = new ArrayList<>();
        for (String name : available(export)) {
            if (queries.isEmpty() || matches(queries, name, true)) out.add(name);
        }
        String identity = queries.contains(IDENTITY) ? export.backend().identity() : null;
        if (identity != null) out.add(IDENTITY + ":" + identity);
        return out;
    }

    /** The query that asks for an export's identity (see {@link #list}). */
    static final String IDENTITY = "jnbd:identity";

    /**
     * Selects the contexts of {@code export} that {@code queries} name, in place of any earlier selection, for the
     * export name {@code asked} as the client gave it.
     */
    List<MetaContext> set(Export export, String asked, List<String> queries) throws InvalidQuery {
        forget();
        checkNamespaces(queries);
        List<MetaContext> chosen = new ArrayList<>();
        for (String name : available(export)) {
            if (matches(queries, name, false)) chosen.add(new MetaContext(ids.computeIfAbsent(name, n -> ids.size() + 1), name));
        }
        selectedName = asked;
        selected = List.copyOf(chosen);
        return selected;
    }

    /** Drops the selection: a SET begins so (even one that fails), and STARTTLS. */
    void forget() {
        selectedName = null;
        selected = List.of();
    }

    /**
     * What block status answers after {@code NBD_OPT_GO} with {@code asked}: the last selection if it was made for that
     * very name, else nothing. The spec ties a selection to the export name the client used; {@code boot/pc42} and
     * {@code boot/pc43} are one export here but two disks, and a selection made for one must not carry to the other.
     */
    List<MetaContext> selectedFor(String asked) {
        return asked.equals(selectedName) ? selected : List.of();
    }

    private static Set<String> available(Export export) {
        Set<String> names = new LinkedHashSet<>();
        names.add(Nbd.CONTEXT_BASE_ALLOCATION);
        names.addAll(export.backend().metaContexts());
        return names;
    }

    private static boolean matches(List<String> queries, String name, boolean list) {
        for (String q : queries) {
            if (q.equals(name) || list && q.endsWith(":") && name.startsWith(q)) return true;
        }
        return false;
    }

    private static void checkNamespaces(List<String> queries) throws InvalidQuery {
        for (String q : queries) {
            if (q.indexOf(':') <= 0) throw new InvalidQuery("query '" + q + "' has no namespace");
        }
    }
}
