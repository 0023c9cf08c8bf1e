package io.jnbd.server.backend;

import io.jnbd.protocol.Nbd;
import java.nio.ByteBuffer;
import java.util.EnumSet;
import java.util.Set;
import java.util.concurrent.CompletableFuture;

/**
 * Hides every write capability of the backend it wraps; the protocol edge then refuses writes with EPERM, and so does
 * this filter should one reach it. Reads, block status, flush and cache go down unchanged.
 */
public final class ReadOnlyFilter extends FilterBackend {
    /** The capabilities it hides. */
    public static final Set<Capability> WRITES =
        java.util.Collections.unmodifiableSet(EnumSet.of(Capability.WRITE, Capability.FUA, Capability.TRIM, Capability.ZERO,
            Capability.FAST_ZERO));

    private final Set<Capability> caps;

    public ReadOnlyFilter(Backend inner) {
        super(inner);
        EnumSet<Capability> c = EnumSet.noneOf(Capability.class);
        c.addAll(inner.capabilities());
        c.removeAll(WRITES);
        this.caps = Set.copyOf(c);
    }

    @Override public Set<Capability> capabilities() { return caps; }

    /** Every one: reads reach the inner's data unchanged whichever path they take, and writes are refused on all. */
    @Override public Set<Trait> traits() { return inner.traits(); }

    @Override public String describe() { return inner.describe() + ", read-only"; }

    private static NbdErrorException readOnly() {
        return new NbdErrorException(Nbd.EPERM, "export is read-only");
    }

    @Override public void write(long offset, ByteBuffer src, boolean fua) throws NbdErrorException { throw readOnly(); }
    @Override public void write(long offset, ByteBuffer[] srcs, boolean fua) throws NbdErrorException { throw readOnly(); }

    @Override
    public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
        return CompletableFuture.failedFuture(readOnly());
    }

    @Override public void trim(long offset, long length, boolean fua) throws NbdErrorException { throw readOnly(); }
    @Override public void zero(long o, long l, boolean t, boolean f, boolean fua) throws NbdErrorException { throw readOnly(); }
}
