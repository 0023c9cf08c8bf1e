package io.jnbd.server.filter.cow;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Backend.Capability;
import io.jnbd.server.backend.Backend.Trait;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.FilterFactory;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.EnumSet;
import java.util.Locale;
import java.util.Set;

/**
 * {@code filter=cow}: copy-on-write over a base that is opened read-only. Keys: {@code cow-block-size=} (nbdkit's, 64K
 * by default), {@code cow-dir=DIR} where overlays are kept, {@code cow-overlay=shared|connection|client|identity}.
 */
public final class CowFilterFactory implements FilterFactory {
    static final int DEFAULT_BLOCK = 64 * 1024, MIN_BLOCK = 4096, MAX_BLOCK = 4 << 20;

    @Override public String name() { return "cow"; }

    @Override
    public String usage() {
        return "filter=cow,cow-dir=DIR[,cow-overlay=shared|connection|client|identity][,cow-block-size=SIZE]";
    }

    @Override public Set<String> options() { return Set.of("cow-block-size", "cow-dir", "cow-overlay"); }

    @Override
    public void check(BackendOptions options) {
        blockSize(options);
        CowStore.Mode mode = mode(options);
        if (mode != CowStore.Mode.CONNECTION && options.string("cow-dir", null) == null) {
            throw new IllegalArgumentException("filter=cow needs cow-dir=DIR, where its overlays are kept"
                + " (only cow-overlay=connection, whose overlays go with their connections, does without)");
        }
    }

    @Override
    public String describe(BackendOptions options) {
        String dir = options.string("cow-dir", null);
        return "cow(" + mode(options).name().toLowerCase(Locale.ROOT) + " overlays" + (dir == null ? "" : " in " + dir)
            + ", blocks of " + blockSize(options) + ")";
    }

    /** Nothing below it is written: the base opens read-only, while the filter offers writes of its own. */
    @Override public boolean opensBaseReadOnly() { return true; }

    /**
     * It changes what reads see, so no sendfile past it (ZERO_COPY), and its calls wait on its files (NEVER_BLOCKS,
     * ASYNC go); REMOTE stays, as a base on another machine still makes its calls wait on the network. CACHED_READS
     * stays over a base that has it: the filter answers such a read itself, from its overlay's page cache and the
     * base's, so a warm cow export is read on the connection's thread as a plain file is.
     */
    @Override
    public Set<Trait> traits(Set<Trait> below) {
        EnumSet<Trait> out = EnumSet.noneOf(Trait.class);
        if (below.contains(Trait.REMOTE)) out.add(Trait.REMOTE);
        if (below.contains(Trait.CACHED_READS)) out.add(Trait.CACHED_READS);
        return out;
    }

    /**
     * Every write of its own and block status, whatever the read-only base offers; CACHE if the base has it; MULTI_CONN
     * unless each connection has an overlay of its own (then one connection's writes are not another's to read).
     */
    @Override
    public Set<Capability> capabilities(BackendOptions options, Set<Capability> below) {
        EnumSet<Capability> c = EnumSet.of(Capability.WRITE, Capability.FLUSH, Capability.FUA, Capability.TRIM,
            Capability.ZERO, Capability.FAST_ZERO, Capability.EXTENTS);
        if (below.contains(Capability.CACHE)) c.add(Capability.CACHE);
        if (mode(options) != CowStore.Mode.CONNECTION) c.add(Capability.MULTI_CONN);
        return c;
    }

    @Override
    public FilterBackend wrap(Backend inner, BackendOptions options) {
        CowStore.Mode mode = mode(options);
        int blockSize = blockSize(options);
        String dir = options.string("cow-dir", null);
        CowStore store;
        try {
            store = CowStore.open(mode, dir == null ? null : Path.of(dir), blockSize, inner);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        Set<Capability> caps = Set.copyOf(capabilities(options, inner.capabilities()));
        Set<Trait> traits = Set.copyOf(traits(inner.traits()));
        return mode == CowStore.Mode.CLIENT || mode == CowStore.Mode.IDENTITY
            ? new NamedCowFilter(inner, store, caps, traits, blockSize)
            : new CowFilter(inner, store, caps, traits, blockSize);
    }

    static CowStore.Mode mode(BackendOptions options) {
        String m = options.choice("cow-overlay", "shared", "shared", "connection", "client", "identity");
        return CowStore.Mode.valueOf(m.toUpperCase(Locale.ROOT));
    }

    static int blockSize(BackendOptions options) {
        long b = options.size("cow-block-size", DEFAULT_BLOCK);
        if (Long.bitCount(b) != 1 || b < MIN_BLOCK || b > MAX_BLOCK) {
            throw new IllegalArgumentException("cow-block-size=" + options.asMap().get("cow-block-size")
                + " must be a power of two from 4K to 4M");
        }
        return (int) b;
    }
}
