package io.jnbd.server.backend;

import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A filter on the test class path only (registered in the tests' own services file): {@code filter=probe,probe=NAME}
 * counts the reads and writes that reach it under NAME, so a test sees how far into a stack a request went; with
 * {@code probe-needs-write=true} it refuses to stand in front of anything read-only, as a write-back cache would.
 */
public final class ProbeFilterFactory implements FilterFactory {
    /** Reads and writes that reached each probe, by name. */
    public static final Map<String, AtomicInteger> READS = new ConcurrentHashMap<>(), WRITES = new ConcurrentHashMap<>();

    @Override public String name() { return "probe"; }

    @Override public String usage() { return "filter=probe,probe=NAME[,probe-needs-write=true]"; }

    @Override public Set<String> options() { return Set.of("probe", "probe-needs-write"); }

    @Override public void check(BackendOptions options) { options.string("probe", "x"); }

    @Override public String describe(BackendOptions options) { return "probe(" + options.string("probe", "x") + ")"; }

    @Override public Set<Backend.Trait> traits(Set<Backend.Trait> below) { return Set.of(); }

    @Override
    public String refusal(BackendOptions options, Set<Backend.Capability> below) {
        if (!options.has("probe-needs-write") || below.contains(Backend.Capability.WRITE)) return null;
        return "it writes to what is behind it, which is read-only";
    }

    @Override
    public FilterBackend wrap(Backend inner, BackendOptions options) {
        String name = options.string("probe", "x");
        AtomicInteger reads = READS.computeIfAbsent(name, k -> new AtomicInteger());
        AtomicInteger writes = WRITES.computeIfAbsent(name, k -> new AtomicInteger());
        return new FilterBackend(inner) {
            @Override
            public void read(long offset, java.nio.ByteBuffer dst) throws java.io.IOException {
                reads.incrementAndGet();
                inner.read(offset, dst);
            }

            @Override
            public void write(long offset, java.nio.ByteBuffer src, boolean fua) throws java.io.IOException {
                writes.incrementAndGet();
                inner.write(offset, src, fua);
            }

            @Override
            public void write(long offset, java.nio.ByteBuffer[] srcs, boolean fua) throws java.io.IOException {
                writes.incrementAndGet();
                inner.write(offset, srcs, fua);
            }
        };
    }
}
