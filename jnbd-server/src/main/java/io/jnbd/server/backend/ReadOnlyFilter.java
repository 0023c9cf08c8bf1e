package io.jnbd.server.backend;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;

/** Hides every write capability of the backend it wraps; the protocol edge then refuses writes with EPERM. */
public final class ReadOnlyFilter implements Backend {
    private final Backend inner;
    private final Set<Capability> caps;

    public ReadOnlyFilter(Backend inner) {
        this.inner = inner;
        EnumSet<Capability> c = EnumSet.noneOf(Capability.class);
        c.addAll(inner.capabilities());
        c.removeAll(EnumSet.of(Capability.WRITE, Capability.FUA, Capability.TRIM, Capability.ZERO, Capability.FAST_ZERO));
        this.caps = Set.copyOf(c);
    }

    @Override public long size() { return inner.size(); }
    @Override public Set<Trait> traits() { return inner.traits(); } // it hides writes, it never changes bytes
    @Override public Set<Capability> capabilities() { return caps; }
    @Override public BlockSizes blockSizes() { return inner.blockSizes(); }
    @Override public void read(long offset, ByteBuffer dst) throws IOException { inner.read(offset, dst); }
    @Override public FileChannel zeroCopySource() { return inner.zeroCopySource(); }
    @Override public int zeroCopyFd() { return inner.zeroCopyFd(); }
    @Override public void flush() throws IOException { inner.flush(); }
    @Override public void cache(long offset, long length) throws IOException { inner.cache(offset, length); }
    @Override public List<Extent> extents(long offset, long length) throws IOException { return inner.extents(offset, length); }
    @Override public String describe() { return inner.describe() + ", read-only"; }
    @Override public void close() throws IOException { inner.close(); }

    private static NbdErrorException readOnly() {
        return new NbdErrorException(io.jnbd.protocol.Nbd.EPERM, "export is read-only");
    }

    @Override public void write(long offset, ByteBuffer src, boolean fua) throws IOException { throw readOnly(); }
    @Override public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException { throw readOnly(); }
    @Override public void trim(long offset, long length, boolean fua) throws IOException { throw readOnly(); }
    @Override public void zero(long o, long l, boolean t, boolean f, boolean fua) throws IOException { throw readOnly(); }
}
