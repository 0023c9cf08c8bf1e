package io.jnbd.server.backend;

import java.util.Set;

/**
 * Makes the filters of one name, as an export spec stacks them: {@code filter=NAME} followed by the filter's own
 * keys ({@code filter=delay,delay-read=5ms}). Filters are found with {@link java.util.ServiceLoader} (see
 * {@link FilterFactories}), as backends are: a module adds one by listing its factory in
 * {@code META-INF/services/io.jnbd.server.backend.FilterFactory}.
 *
 * <p>A key belongs to the filter that declares it, whatever its place in the spec, so the keys of two filters must
 * not clash ({@link FilterFactories} refuses to load two that share one). Where nbdkit has the filter, its name and
 * keys are nbdkit's, so that a user coming from nbdkit reads them at once.
 */
public interface FilterFactory {
    /** What follows {@code filter=}, in lower case: {@code readonly}, {@code delay}, {@code error}. */
    String name();

    /** One line for help texts: {@code filter=delay[,delay-read=DELAY][,delay-write=DELAY]...}. */
    String usage();

    /** The keys this filter takes. */
    Set<String> options();

    /**
     * Checks the options now, so that a bad spec fails when it is read rather than when it is opened; the
     * message names the key and is meant for the user as it is.
     */
    void check(BackendOptions options);

    /**
     * The keys that may be given more than once ({@code dirty-bitmap=b0,dirty-bitmap=b1}): their values reach the filter
     * joined by {@code ;} in the order given, as one value. Any other key given twice keeps its last value.
     */
    default Set<String> repeatable() {
        return Set.of();
    }

    /**
     * Checks what {@link #check(BackendOptions)} cannot: whether the options fit the backend the stack stands in front
     * of, as far as the spec tells. {@code image} is the file that backend serves ({@link BackendFactory#imageFile}),
     * null for a kind without one. Called after {@link #check(BackendOptions)}; nothing by default.
     */
    default void checkFor(BackendOptions options, java.nio.file.Path image) {}

    /** The filter's part of a resolved stack, for {@code jnbd serve --check}: {@code delay(read 5ms)}. */
    String describe(BackendOptions options);

    /**
     * The traits a filter of this kind passes on, from those of what is behind it: known before anything is
     * opened (an export's tuning defaults follow them), and the same as its instances' {@link Backend#traits()}.
     * A trait opens a path on which requests skip the filter's own code (see {@link FilterBackend}).
     */
    Set<Backend.Trait> traits(Set<Backend.Trait> below);

    /**
     * The traits a filter configured with {@code options} passes on: one whose keys leave a path untouched may keep
     * the trait that opens it (a delay filter with no delays keeps {@link Backend.Trait#ZERO_COPY}, so a stack of
     * pass-through filters still sends reads by sendfile). The stack asks this one; by default, {@link #traits(Set)}.
     */
    default Set<Backend.Trait> traits(BackendOptions options, Set<Backend.Trait> below) {
        return traits(below);
    }

    /**
     * The capabilities a filter with {@code options} offers in front of {@code below}, known before anything is opened;
     * the stack's check uses it to tell a filter what the ones inside it leave.
     */
    default Set<Backend.Capability> capabilities(BackendOptions options, Set<Backend.Capability> below) {
        return below;
    }

    /**
     * Why this filter, with {@code options}, cannot stand in front of a backend (or filter) offering {@code below}, or
     * null when it can:
     * a filter that must write (a write-back cache) cannot stand over a read-only one. Asked when the spec is
     * read, of what is known then, and again when the chain is built, of what the inner backend really offers.
     */
    default String refusal(BackendOptions options, Set<Backend.Capability> below) {
        return null;
    }

    /**
     * Whether nothing below this filter is ever written, so that the backend opens read-only: true for the read-only
     * filter, and for one that takes the writes itself (copy-on-write keeps them in its overlay and leaves the base
     * untouched, while offering WRITE to its clients).
     */
    default boolean opensBaseReadOnly() {
        return false;
    }

    /**
     * The filter in front of {@code inner}, forwarding what it does not change; {@code options} have passed {@link #check}.
     * A filter with files of its own that cannot open them throws {@link java.io.UncheckedIOException}, whose cause's
     * message is for the user.
     */
    FilterBackend wrap(Backend inner, BackendOptions options);
}
