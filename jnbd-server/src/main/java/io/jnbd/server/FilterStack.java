package io.jnbd.server;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.FilterFactories;
import io.jnbd.server.backend.FilterFactory;
import java.io.IOException;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The filters of one export, outermost first, as nbdkit orders its {@code --filter}s: a client's request meets the
 * first one first, and the backend's answer passes it last. Each filter comes with the keys it takes.
 */
public record FilterStack(List<Filter> filters) {

    /** One filter of a stack and its keys. */
    public record Filter(String name, BackendOptions options) {
        public FilterFactory factory() {
            return FilterFactories.of(name);
        }

        public String describe() {
            return factory().describe(options);
        }
    }

    public static final FilterStack NONE = new FilterStack(List.of());

    public FilterStack {
        filters = List.copyOf(filters);
    }

    /**
     * The stack that a spec's parts name: {@code names} from {@code filter=NAME} in order (with {@code readonly},
     * the short form, put outermost), and {@code keys} the filters' keys, each going to the filter that takes it.
     * The message of the exception names the key or filter and is meant for the user.
     */
    static FilterStack of(List<String> names, boolean readonly, Map<String, String> keys) {
        return of(names, readonly, keys, null);
    }

    /** As {@link #of(List, boolean, Map)}, in front of a backend serving the file {@code image} (null: none). */
    static FilterStack of(List<String> names, boolean readonly, Map<String, String> keys, java.nio.file.Path image) {
        List<String> order = new ArrayList<>();
        if (readonly) order.add("readonly");
        for (String name : names) {
            if (name == null || name.isEmpty()) throw new IllegalArgumentException("filter= needs the name of a filter (" + FilterFactories.nameList() + ")");
            FilterFactory f = FilterFactories.of(name);
            if (f == null) throw new IllegalArgumentException("filter=" + name + ": no such filter (use " + FilterFactories.nameList() + ")");
            if (order.contains(name)) {
                throw new IllegalArgumentException("filter=" + name + " is named twice" + (name.equals("readonly") && readonly
                    ? " (readonly is short for filter=readonly)" : "; a stack holds each filter once"));
            }
            order.add(name);
        }
        Map<String, Map<String, String>> byFilter = new LinkedHashMap<>();
        for (String name : order) byFilter.put(name, new LinkedHashMap<>());
        keys.forEach((key, value) -> {
            FilterFactory owner = FilterFactories.owning(key);
            Map<String, String> own = byFilter.get(owner.name());
            if (own == null) throw new IllegalArgumentException(key + "= is a key of the " + owner.name() + " filter: add filter=" + owner.name());
            own.put(key, value);
        });
        List<Filter> filters = new ArrayList<>();
        for (var e : byFilter.entrySet()) {
            BackendOptions options = new BackendOptions(e.getValue());
            FilterFactories.of(e.getKey()).check(options);
            FilterFactories.of(e.getKey()).checkFor(options, image);
            filters.add(new Filter(e.getKey(), options));
        }
        return new FilterStack(filters);
    }

    public boolean isEmpty() {
        return filters.isEmpty();
    }

    /** Whether the stack holds the read-only filter: the export refuses writes. */
    public boolean readOnly() {
        return filters.stream().anyMatch(f -> f.name().equals("readonly"));
    }

    /**
     * Whether nothing below the stack is ever written, so that the backend opens read-only: the read-only filter, or
     * one that keeps the writes itself (copy-on-write), is in it ({@link FilterFactory#opensBaseReadOnly}).
     */
    public boolean opensBaseReadOnly() {
        return filters.stream().anyMatch(f -> f.factory().opensBaseReadOnly());
    }

    /** The traits that leave the stack, from the backend's: only those every filter keeps. */
    public Set<Backend.Trait> traits(Set<Backend.Trait> backend) {
        Set<Backend.Trait> t = backend;
        for (Filter f : filters.reversed()) t = f.factory().traits(f.options(), t);
        return t;
    }

    /**
     * Checks that each filter can stand in front of what is inside it, from the capabilities the backend may offer
     * (every one, less the writes when the backend opens read-only); a backend that
     * offers less is checked again when the chain is built.
     */
    void checkStacking() {
        Set<Backend.Capability> below = EnumSet.allOf(Backend.Capability.class);
        if (opensBaseReadOnly()) below.removeAll(io.jnbd.server.backend.ReadOnlyFilter.WRITES);
        for (Filter f : filters.reversed()) {
            String refusal = f.factory().refusal(f.options(), below);
            if (refusal != null) throw new IllegalArgumentException("filter=" + f.name() + ": " + refusal);
            below = f.factory().capabilities(f.options(), below);
        }
    }

    /** The chain in front of {@code backend}, innermost filter first; {@code backend} is not closed on failure. */
    public Backend wrap(Backend backend) throws IOException {
        Backend b = backend;
        for (Filter f : filters.reversed()) {
            String refusal = f.factory().refusal(f.options(), b.capabilities());
            if (refusal != null) throw new IOException("filter=" + f.name() + " cannot stand in front of " + b.describe() + ": " + refusal);
            try {
                b = f.factory().wrap(b, f.options());
            } catch (java.io.UncheckedIOException e) {
                // A filter with files of its own (cow) could not open them: the message says which and why.
                throw new IOException("filter=" + f.name() + ": " + e.getCause().getMessage(), e.getCause());
            }
        }
        return b;
    }

    /** The backend behind a chain this stack built. */
    public Backend unwrap(Backend chain) {
        Backend b = chain;
        for (int i = 0; i < filters.size(); i++) b = ((FilterBackend) b).inner();
        return b;
    }

    /** {@code delay(read 5ms) -> error(EIO 10%) -> }: the stack as a request meets it, for {@code --check}. */
    public String describe() {
        StringBuilder b = new StringBuilder();
        for (Filter f : filters) b.append(f.describe()).append(" -> ");
        return b.toString();
    }

    /**
     * The stack as spec parts, outermost first: {@code readonly} when the read-only filter is outermost (as the short
     * form puts it), else {@code filter=NAME}, each followed by its keys.
     */
    List<Map.Entry<String, String>> parts() {
        List<Map.Entry<String, String>> out = new ArrayList<>();
        for (int i = 0; i < filters.size(); i++) {
            Filter f = filters.get(i);
            if (i == 0 && f.name().equals("readonly")) out.add(new java.util.AbstractMap.SimpleImmutableEntry<>("readonly", null));
            else out.add(Map.entry("filter", f.name()));
            f.options().asMap().forEach((k, v) -> out.add(new java.util.AbstractMap.SimpleImmutableEntry<>(k, v)));
        }
        return out;
    }
}
