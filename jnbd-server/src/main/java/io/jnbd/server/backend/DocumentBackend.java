package io.jnbd.server.backend;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Set;
import java.util.function.Supplier;

/**
 * A read-only export whose bytes are a document rendered afresh on every read, padded with spaces to a fixed
 * size: how a memory server and a pool export report their state (as JSON) to anything that can read an NBD
 * export, {@code nbdcopy nbd://HOST/status -} included. A reader should take it in one request; two reads may see
 * two renderings.
 */
public final class DocumentBackend implements Backend {
    private final int size;
    private final Supplier<byte[]> render;
    private final String what;

    public DocumentBackend(int size, Supplier<byte[]> render, String what) {
        this.size = size;
        this.render = render;
        this.what = what;
    }

    @Override public long size() { return size; }
    @Override public Set<Capability> capabilities() { return Set.of(Capability.MULTI_CONN); }
    @Override public Set<Trait> traits() { return Set.of(Trait.NEVER_BLOCKS); }
    @Override public String describe() { return what; }

    @Override
    public void read(long offset, ByteBuffer dst) {
        byte[] doc = render.get();
        byte[] page = Arrays.copyOf(doc, size);
        if (doc.length < size) Arrays.fill(page, doc.length, size, (byte) ' ');
        dst.put(page, (int) offset, dst.remaining());
    }

    private static UnsupportedOperationException readOnly() {
        return new UnsupportedOperationException("a document export is read-only");
    }

    @Override public void write(long offset, ByteBuffer src, boolean fua) { throw readOnly(); }
    @Override public void flush() {}
    @Override public void trim(long offset, long length, boolean fua) { throw readOnly(); }
    @Override public void zero(long o, long l, boolean t, boolean f, boolean fua) { throw readOnly(); }
    @Override public void close() {}
}
