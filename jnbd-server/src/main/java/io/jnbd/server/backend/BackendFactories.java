package io.jnbd.server.backend;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.ServiceLoader;
import java.util.TreeMap;

/** The backend kinds on the class path, found once: file and memory from this module, others from theirs. */
public final class BackendFactories {
    private static final Map<String, BackendFactory> BY_KIND = load();

    private BackendFactories() {}

    private static Map<String, BackendFactory> load() {
        Map<String, BackendFactory> m = new TreeMap<>();
        for (BackendFactory f : ServiceLoader.load(BackendFactory.class, BackendFactories.class.getClassLoader())) {
            if (m.putIfAbsent(f.kind(), f) != null) throw new IllegalStateException("two backend kinds named '" + f.kind() + "'");
        }
        return m;
    }

    /** The factory of {@code kind}, or null. */
    public static BackendFactory of(String kind) {
        return BY_KIND.get(kind);
    }

    /** Every kind, file and memory first, the rest by name. */
    public static List<BackendFactory> all() {
        List<BackendFactory> out = new ArrayList<>();
        for (String first : List.of("file", "memory")) {
            if (BY_KIND.containsKey(first)) out.add(BY_KIND.get(first));
        }
        for (BackendFactory f : BY_KIND.values()) {
            if (!out.contains(f)) out.add(f);
        }
        return out;
    }

    /** {@code file: or memory:}, or {@code file:, memory: or pool:}: for messages that list the kinds. */
    public static String kindList() {
        List<String> kinds = all().stream().map(f -> f.kind() + ":").toList();
        if (kinds.size() == 1) return kinds.getFirst();
        return String.join(", ", kinds.subList(0, kinds.size() - 1)) + " or " + kinds.getLast();
    }
}
