package io.jnbd.server.filter.cow;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BlockSizes;
import io.jnbd.server.backend.ConnectionContext;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.NbdErrorException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Set;

/**
 * {@code filter=cow}: writes, trims and zeroes go to an overlay (see {@link Overlay}); the base behind is opened read-only
 * and never written. Which overlay a request meets is the connection's: the export's one ({@code shared}), one made for
 * the connection ({@code connection}), or the one named by the client ({@code client}, {@code identity}: see
 * {@link NamedCowFilter}). The export's own instance holds the shared overlay or none; each connection gets a copy
 * holding its overlay ({@link #forConnection}).
 */
class CowFilter extends FilterBackend {
    final CowStore store;
    private final Set<Capability> capabilities;
    private final Set<Trait> traits;
    private final BlockSizes blockSizes;
    /** This connection's overlay; at the export level, the shared one or null (then nothing may be written here). */
    private Overlay overlay;
    /** Whether {@link #overlay} is this connection's alone, to be discarded when it ends. */
    private boolean temporary;
    /** Whether this connection only reads: {@link #overlay}, another's, as it is at each request (a backup's view), or the base when {@link #overlay} is null. */
    private boolean viewOnly;

    CowFilter(Backend inner, CowStore store, Set<Capability> capabilities, Set<Trait> traits, int blockSize) {
        super(inner);
        this.store = store;
        this.capabilities = capabilities;
        this.traits = traits;
        this.overlay = store.shared();
        BlockSizes below = inner.blockSizes();
        int preferred = blockSize <= below.maximum() ? Math.max(below.preferred(), blockSize) : below.preferred();
        this.blockSizes = new BlockSizes(below.minimum(), preferred, below.maximum());
    }

    @Override public Set<Capability> capabilities() { return capabilities; }
    @Override public Set<Trait> traits() { return traits; }
    @Override public BlockSizes blockSizes() { return blockSizes; }

    /**
     * A connection's own overlay is gone with the connection: a client that comes back finds other data, so each
     * asking gets a new identity. Named and shared overlays live in cow-dir and outlast the process, as the base does.
     */
    @Override
    public String identity() {
        if (store.mode == CowStore.Mode.CONNECTION) {
            return java.util.HexFormat.of().toHexDigits(new java.security.SecureRandom().nextLong());
        }
        return inner.identity();
    }

    /** The overlay a connection with {@code context} writes to. */
    Overlay overlayFor(ConnectionContext context) throws IOException {
        return switch (store.mode) {
            case SHARED -> store.shared();
            case CONNECTION -> store.temporary(context.peer());
            case CLIENT, IDENTITY -> throw new IllegalStateException("a named overlay is chosen by NamedCowFilter");
        };
    }

    /** Whether a connection with {@code context} may only read its overlay. */
    boolean viewOnly(ConnectionContext context) {
        return false;
    }

    @Override
    public Backend forConnection(ConnectionContext context) {
        Backend view = inner.forConnection(context);
        Overlay o;
        try {
            o = overlayFor(context);
        } catch (IOException e) {
            view.connectionClosed();
            throw new UncheckedIOException(e);
        }
        boolean onlyViews = viewOnly(context);
        if (view == inner && o == overlay && !onlyViews) return this;
        CowFilter copy = (CowFilter) over(view);
        copy.overlay = o;
        copy.temporary = store.mode == CowStore.Mode.CONNECTION;
        copy.viewOnly = onlyViews;
        return copy;
    }

    @Override
    public void connectionClosed() {
        try {
            if (temporary) store.release(overlay);
        } finally {
            super.connectionClosed();
        }
    }

    private Overlay overlay() throws NbdErrorException {
        Overlay o = overlay;
        if (viewOnly) throw new NbdErrorException(Nbd.EPERM, o == null ? "the base of per-client overlays, read-only" : "a read-only view of overlay '" + o.name + "'");
        if (o == null) throw new NbdErrorException(Nbd.EPERM, "this export's overlays are its connections': nothing is written here");
        return o;
    }

    @Override
    public void read(long offset, ByteBuffer dst) throws IOException {
        if (overlay == null) inner.read(offset, dst); // the export itself, without a connection: the base as it is
        else if (viewOnly) overlay.readSteady(offset, dst, inner);
        else overlay.read(offset, dst, inner);
    }

    /** Answers from the overlay's and the base's page cache alike: a cow export keeps the quick way of a plain file's reads. */
    @Override
    public boolean readIfCached(long offset, ByteBuffer dst) throws IOException {
        if (overlay == null) return inner.readIfCached(offset, dst);
        if (viewOnly) return false; // its reads hold the overlay's locks, which no connection's thread may wait for
        return overlay.readIfCached(offset, dst, inner);
    }

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        overlay().write(offset, src, inner);
        if (fua) overlay.flush();
    }

    @Override
    public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        Overlay o = overlay();
        long pos = offset;
        for (ByteBuffer b : srcs) {
            int n = b.remaining();
            o.write(pos, b, inner);
            pos += n;
        }
        if (fua) o.flush();
    }

    /** Every overlay of the export from its own instance (the server's flush at stop), else this connection's. */
    @Override
    public void flush() throws IOException {
        if (viewOnly) return; // the view writes nothing, not even the map: its client's flushes make the overlay durable
        if (overlay == null || overlay == store.shared()) store.flush();
        else overlay.flush();
    }

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        zero(offset, length, true, false, fua);
    }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        overlay().zero(offset, length, inner);
        if (fua) overlay.flush();
    }

    @Override
    public List<Extent> extents(long offset, long length) throws IOException {
        if (overlay == null) return inner.extents(offset, length);
        return overlay.extents(offset, length, inner);
    }

    @Override
    public String describe() {
        return inner.describe() + ", cow (" + store.mode.name().toLowerCase(java.util.Locale.ROOT) + " overlays)";
    }

    @Override
    public void close() throws IOException {
        try {
            store.close();
        } finally {
            inner.close();
        }
    }
}
