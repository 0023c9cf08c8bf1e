package io.jnbd.server.backend;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

/**
 * For {@link Backend.Trait#ASYNC} backends whose calls are completed by a thread of their own, such as a network
 * client's reader: the calls completed inside one {@link #together} have their replies sent together when it
 * ends, one gathering write per client connection, rather than one system call per reply as they complete.
 * Through the nbd: proxy at 4k QD32 those sends were one sendmsg per request on the upstream's reader thread.
 */
public final class Completions {
    /**
     * Set only on threads that have run {@link #together}: {@link #hold} is asked for every reply made off a reader,
     * often on a fresh virtual thread, which must not get a map of its own just to learn it holds nothing.
     */
    private static final ThreadLocal<Completions> OF_THREAD = new ThreadLocal<>();

    /** Items held per sink until the end of the current {@link #together}; insertion order is wire order. */
    private final Map<Consumer<?>, List<Object>> held = new IdentityHashMap<>();
    private boolean active;

    private Completions() {
    }

    /**
     * Runs {@code completions} (code that completes backend futures), then sends the replies their callbacks made
     * on this thread meanwhile. Nested calls join the outer one. Usable as an {@link java.util.concurrent.Executor}.
     */
    public static void together(Runnable completions) {
        Completions c = OF_THREAD.get();
        if (c == null) OF_THREAD.set(c = new Completions());
        if (c.active) {
            completions.run();
            return;
        }
        c.active = true;
        try {
            completions.run();
        } finally {
            c.active = false;
            c.release();
        }
    }

    /**
     * Holds {@code item} for {@code sink} until the end of the {@link #together} this thread is in; false, holding
     * nothing, outside one. {@code sink} is compared by identity: one per destination, kept in a field.
     */
    public static <T> boolean hold(Consumer<List<T>> sink, T item) {
        Completions c = OF_THREAD.get();
        if (c == null || !c.active) return false;
        c.held.computeIfAbsent(sink, k -> new ArrayList<>()).add(item);
        return true;
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    private void release() {
        if (held.isEmpty()) return;
        List<Map.Entry<Consumer<?>, List<Object>>> all = new ArrayList<>(held.entrySet());
        held.clear();
        RuntimeException first = null;
        for (var e : all) {
            try {
                ((Consumer) e.getKey()).accept(e.getValue());
            } catch (RuntimeException ex) {
                // Every other sink still gets its items: one connection's failure must not strand another's replies.
                if (first == null) first = ex;
            }
        }
        if (first != null) throw first;
    }
}
