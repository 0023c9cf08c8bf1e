package io.jnbd.server.backend;

import java.io.IOException;
import java.nio.ByteBuffer;
import io.jnbd.server.io.PageCacheSource;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;

/**
 * A backend in front of another: every call goes down to {@link #inner()} unchanged, so a filter overrides only what
 * it changes and a method added to {@link Backend} later is forwarded here once rather than forgotten by each filter
 * (a filter that wrote out its own forwards once lost the pool's asynchronous reads: every read failed).
 *
 * <p>One thing is not passed down by default: the inner backend's {@link #traits()}. Each trait opens a path on which
 * requests skip this filter's own {@code read} and {@code write} (sendfile from the inner's file, the inner's
 * {@code readAsync}, a call on the connection's thread that must not wait), so a filter keeps a trait only by saying
 * so, after making sure that path does what its synchronous calls do.
 */
public abstract class FilterBackend implements Backend, Cloneable {
    /** Set once, by the constructor, or by {@link #forConnection} on the copy it makes (see there). */
    protected Backend inner;

    protected FilterBackend(Backend inner) {
        this.inner = java.util.Objects.requireNonNull(inner, "inner");
    }

    /** The backend this filter is in front of. */
    public final Backend inner() {
        return inner;
    }

    /**
     * The first backend of type {@code type} along the chain from {@code b} inwards ({@code b} itself included), or
     * null: what a filter hides of the backend behind it beyond {@link Backend}, such as {@link StatusReporting}.
     */
    public static <T> T find(Backend b, Class<T> type) {
        Backend at = b;
        while (!type.isInstance(at)) {
            if (!(at instanceof FilterBackend f)) return null;
            at = f.inner;
        }
        return type.cast(at);
    }

    @Override public long size() { return inner.size(); }
    @Override public Set<Capability> capabilities() { return inner.capabilities(); }
    @Override public final boolean can(Capability c) { return capabilities().contains(c); }
    @Override public BlockSizes blockSizes() { return inner.blockSizes(); }

    /** None unless the filter says which of the inner's it keeps (see the class comment). */
    @Override public Set<Trait> traits() { return Set.of(); }
    @Override public final boolean has(Trait t) { return traits().contains(t); }
    /** The inner's, only through a filter that keeps {@link Trait#ZERO_COPY}: reads taken from it skip {@link #read}. */
    @Override public PageCacheSource pageCache() { return has(Trait.ZERO_COPY) ? inner.pageCache() : null; }

    @Override public void read(long offset, ByteBuffer dst) throws IOException { inner.read(offset, dst); }

    /** The inner's, only through a filter that keeps {@link Trait#CACHED_READS}: a read answered so skips {@link #read}. */
    @Override
    public boolean readIfCached(long offset, ByteBuffer dst) throws IOException {
        return has(Trait.CACHED_READS) && inner.readIfCached(offset, dst);
    }
    /** 0 until asked, then 1 or 2: traits are fixed once a chain is built, and some filters compute theirs per call. */
    private volatile byte async;

    private boolean keepsAsync() {
        byte a = async;
        if (a == 0) async = a = has(Trait.ASYNC) ? (byte) 1 : (byte) 2;
        return a == 1;
    }

    /**
     * The inner's, through a filter that keeps {@link Trait#ASYNC} (it has made sure that path does what its {@link
     * #read} does); through one that does not, this filter's own {@link #read}, done now: an asynchronous call must
     * never be a way round a filter, whoever makes it.
     */
    @Override
    public CompletableFuture<Void> readAsync(long offset, ByteBuffer dst) {
        if (keepsAsync()) return inner.readAsync(offset, dst);
        try {
            read(offset, dst);
            return CompletableFuture.completedFuture(null);
        } catch (IOException | RuntimeException e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    @Override public void write(long offset, ByteBuffer src, boolean fua) throws IOException { inner.write(offset, src, fua); }
    @Override public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException { inner.write(offset, srcs, fua); }

    /** As {@link #readAsync}: the inner's through a filter that keeps {@link Trait#ASYNC}, else this filter's {@link #write}. */
    @Override
    public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
        if (keepsAsync()) return inner.writeAsync(offset, srcs, fua);
        try {
            write(offset, srcs, fua);
            return CompletableFuture.completedFuture(null);
        } catch (IOException | RuntimeException e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    @Override public void beginBatch() { inner.beginBatch(); }
    @Override public void endBatch() { inner.endBatch(); }
    @Override public void flush() throws IOException { inner.flush(); }
    @Override public void trim(long offset, long length, boolean fua) throws IOException { inner.trim(offset, length, fua); }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        inner.zero(offset, length, mayTrim, fast, fua);
    }

    @Override public void cache(long offset, long length) throws IOException { inner.cache(offset, length); }
    @Override public List<Extent> extents(long offset, long length) throws IOException { return inner.extents(offset, length); }
    @Override public List<String> metaContexts() { return inner.metaContexts(); }
    @Override public String identity() { return inner.identity(); }
    @Override
    public List<MetaExtent> metaExtents(String context, long offset, long length) throws IOException {
        return inner.metaExtents(context, offset, length);
    }
    /**
     * This filter over the inner's view of the connection: itself when the inner has no state of its own for
     * connections (the usual case: nothing is copied), else a shallow copy whose {@link #inner} is that view.
     *
     * <p>Why a shallow copy ({@link Object#clone}) rather than each filter building itself anew: the copy shares by
     * reference everything the filter holds for the whole export (its configuration, a cache, counters, the
     * export-wide bucket of the rate filter), which is what a request of any connection must meet; a filter written
     * later gets this right without writing a method of its own, and a copy costs one object per connection. The one
     * thing this asks of a filter: state for the whole export lives in objects its fields refer to (an
     * {@code AtomicLong}, not a {@code long} field), which the copy shares. A filter with state of its own per
     * connection overrides this method.
     */
    @Override
    public Backend forConnection(ConnectionContext context) {
        Backend view = inner.forConnection(context);
        return view == inner ? this : over(view);
    }

    /** A shallow copy of this filter in front of {@code view} (see {@link #forConnection}). */
    protected final FilterBackend over(Backend view) {
        try {
            FilterBackend copy = (FilterBackend) super.clone();
            copy.inner = java.util.Objects.requireNonNull(view, "view");
            return copy;
        } catch (CloneNotSupportedException e) {
            throw new AssertionError("FilterBackend is Cloneable", e);
        }
    }

    /** Passed inwards: a filter that kept state for the connection frees it, then passes the call on. */
    @Override public void connectionClosed() { inner.connectionClosed(); }

    @Override public String describe() { return inner.describe(); }
    @Override public void close() throws IOException { inner.close(); }
}
