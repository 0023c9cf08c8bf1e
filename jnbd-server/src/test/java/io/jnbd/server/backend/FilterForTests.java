package io.jnbd.server.backend;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Set;

/** Passes every call to the backend it wraps; tests override the calls they want to change. */
public class FilterForTests implements Backend {
    protected final Backend inner;

    public FilterForTests(Backend inner) {
        this.inner = inner;
    }

    @Override public long size() { return inner.size(); }
    @Override public Set<Capability> capabilities() { return inner.capabilities(); }
    @Override public BlockSizes blockSizes() { return inner.blockSizes(); }
    @Override public void read(long offset, ByteBuffer dst) throws IOException { inner.read(offset, dst); }
    @Override public void write(long offset, ByteBuffer src, boolean fua) throws IOException { inner.write(offset, src, fua); }
    @Override public void flush() throws IOException { inner.flush(); }
    @Override public void trim(long offset, long length, boolean fua) throws IOException { inner.trim(offset, length, fua); }
    @Override public void zero(long o, long l, boolean t, boolean f, boolean fua) throws IOException { inner.zero(o, l, t, f, fua); }
    @Override public List<Extent> extents(long offset, long length) throws IOException { return inner.extents(offset, length); }
    @Override public String describe() { return "test filter over " + inner.describe(); }
    @Override public void close() throws IOException { inner.close(); }
}
