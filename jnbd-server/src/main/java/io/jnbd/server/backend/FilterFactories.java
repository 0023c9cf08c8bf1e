package io.jnbd.server.backend;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.ServiceLoader;
import java.util.TreeMap;

/** The filters on the class path, found once; also which filter a spec key belongs to. */
public final class FilterFactories {
    private static final Map<String, FilterFactory> BY_NAME = new TreeMap<>();
    private static final Map<String, FilterFactory> BY_KEY = new HashMap<>();

    static {
        for (FilterFactory f : ServiceLoader.load(FilterFactory.class, FilterFactories.class.getClassLoader())) {
            if (BY_NAME.putIfAbsent(f.name(), f) != null) throw new IllegalStateException("two filters named '" + f.name() + "'");
            for (String key : f.options()) {
                FilterFactory other = BY_KEY.putIfAbsent(key, f);
                // A key says which filter it configures; shared, it would say nothing.
                if (other != null) {
                    throw new IllegalStateException("filters '" + other.name() + "' and '" + f.name() + "' both take " + key + "=");
                }
            }
        }
    }

    private FilterFactories() {}

    /** The filter named {@code name}, or null. */
    public static FilterFactory of(String name) {
        return BY_NAME.get(name);
    }

    /** The filter that takes {@code key}, or null. */
    public static FilterFactory owning(String key) {
        return BY_KEY.get(key);
    }

    /** Every filter, by name. */
    public static List<FilterFactory> all() {
        return List.copyOf(BY_NAME.values());
    }

    /** {@code cache, delay, error or readonly}: for messages that list the filters. */
    public static String nameList() {
        List<String> names = List.copyOf(BY_NAME.keySet());
        if (names.size() <= 1) return String.join("", names);
        return String.join(", ", names.subList(0, names.size() - 1)) + " or " + names.getLast();
    }
}
