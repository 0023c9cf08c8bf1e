package io.jnbd.server.filter;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.FilterFactory;
import io.jnbd.server.backend.ReadOnlyFilter;
import java.util.EnumSet;
import java.util.Set;

/** {@code filter=readonly}, or {@code readonly} for short: writes, trims and zeroes get EPERM (nbdkit's readonly filter). */
public final class ReadOnlyFilterFactory implements FilterFactory {
    @Override public String name() { return "readonly"; }

    @Override public String usage() { return "filter=readonly (or readonly)"; }

    @Override public Set<String> options() { return Set.of(); }

    @Override public void check(BackendOptions options) {}

    @Override public boolean opensBaseReadOnly() { return true; }

    @Override public String describe(BackendOptions options) { return "readonly"; }

    /** Every one, as {@link ReadOnlyFilter} keeps them. */
    @Override public Set<Backend.Trait> traits(Set<Backend.Trait> below) { return below; }

    @Override
    public Set<Backend.Capability> capabilities(BackendOptions options, Set<Backend.Capability> below) {
        EnumSet<Backend.Capability> c = EnumSet.noneOf(Backend.Capability.class);
        c.addAll(below);
        c.removeAll(ReadOnlyFilter.WRITES);
        return c;
    }

    @Override public io.jnbd.server.backend.FilterBackend wrap(Backend inner, BackendOptions options) { return new ReadOnlyFilter(inner); }
}
