package io.jnbd.server.filter.dirty;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MetaExtent;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Keeps the export's dirty bitmaps ({@link DirtyStore}): every write, trim and zero marks its blocks before it goes
 * down, so no reply can come before its mark; FLUSH and FUA make the marks durable before they are answered. Reads pass
 * untouched, by whatever path the backend offers. The bitmaps are served as {@code qemu:dirty-bitmap:NAME}.
 */
final class DirtyFilter extends FilterBackend implements DirtyBitmaps {
    static final String CONTEXT = "qemu:dirty-bitmap:";
    /** Where a FUA write of an asynchronous backend waits for its marks to reach the disk: never on the connection's thread. */
    private static final ExecutorService FORCER = Executors.newVirtualThreadPerTaskExecutor();

    private final DirtyStore store;
    private final Set<Trait> traits;
    /** Whether FLUSH and FUA make the marks durable: not over data held in memory (see the factory's traits). */
    private final boolean forces;
    private final AtomicBoolean closed = new AtomicBoolean();

    DirtyFilter(Backend inner, DirtyStore store, Set<Trait> traits, boolean forces) {
        super(inner);
        this.store = store;
        this.traits = traits;
        this.forces = forces;
    }

    @Override public Set<Trait> traits() { return traits; }

    @Override
    public String describe() {
        return "dirty(" + String.join(", ", store.names()) + " in " + store.dir + ") -> " + inner.describe();
    }

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        DirtyStore.Epoch e = store.enter(offset, src.remaining());
        try {
            if (fua && forces) store.force();
            inner.write(offset, src, fua);
        } finally {
            DirtyStore.leave(e);
        }
    }

    @Override
    public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        DirtyStore.Epoch e = store.enter(offset, length(srcs));
        try {
            if (fua && forces) store.force();
            inner.write(offset, srcs, fua);
        } finally {
            DirtyStore.leave(e);
        }
    }

    @Override
    public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
        if (!has(Trait.ASYNC)) return super.writeAsync(offset, srcs, fua);
        DirtyStore.Epoch e;
        CompletableFuture<Void> f;
        try {
            e = store.enter(offset, length(srcs));
        } catch (RuntimeException x) {
            return CompletableFuture.failedFuture(x);
        }
        try {
            f = inner.writeAsync(offset, srcs, fua);
            if (fua && forces) f = f.thenCombine(CompletableFuture.runAsync(store::force, FORCER), (a, b) -> null);
        } catch (RuntimeException x) {
            DirtyStore.leave(e);
            return CompletableFuture.failedFuture(x);
        }
        return f.whenComplete((v, t) -> DirtyStore.leave(e));
    }

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        DirtyStore.Epoch e = store.enter(offset, length);
        try {
            if (fua && forces) store.force();
            inner.trim(offset, length, fua);
        } finally {
            DirtyStore.leave(e);
        }
    }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        DirtyStore.Epoch e = store.enter(offset, length);
        try {
            if (fua && forces) store.force();
            inner.zero(offset, length, mayTrim, fast, fua);
        } finally {
            DirtyStore.leave(e);
        }
    }

    /** The marks first: a write the backend made durable has its mark durable too once both are done. */
    @Override
    public void flush() throws IOException {
        if (forces) store.force();
        inner.flush();
    }

    @Override
    public List<String> metaContexts() {
        List<String> out = new ArrayList<>(inner.metaContexts());
        for (String n : store.names()) out.add(CONTEXT + n);
        return out;
    }

    @Override
    public List<MetaExtent> metaExtents(String context, long offset, long length) throws IOException {
        if (context.startsWith(CONTEXT)) {
            String name = context.substring(CONTEXT.length());
            // A context of this name from a filter further in (two dirty filters, one per directory) is answered there.
            if (store.has(name) || !inner.metaContexts().contains(context)) return store.extents(name, offset, length);
        }
        return inner.metaExtents(context, offset, length);
    }

    @Override public List<Info> list() { return store.list(); }
    @Override public void add(String name) throws IOException { store.add(name); }
    @Override public void clear(String name) throws IOException { store.clear(name); }
    @Override public void remove(String name) throws IOException { store.remove(name); }
    @Override public void rotate(String current, String next) throws IOException { store.rotate(current, next); }

    @Override
    public void close() throws IOException {
        if (!closed.compareAndSet(false, true)) return;
        try {
            store.close();
        } finally {
            inner.close();
        }
    }

    private static long length(ByteBuffer[] srcs) {
        long n = 0;
        for (ByteBuffer b : srcs) n += b.remaining();
        return n;
    }
}
