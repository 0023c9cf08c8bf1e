package io.jnbd.pool.memserver;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.NbdErrorException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Set;
import java.util.function.IntSupplier;

/**
 * One connection's view of a client's space: once a newer session of the same client instance has connected,
 * this connection's writes, trims and zeroes fail. A pool client that lost its connection to this server and
 * came back (the server hung and resumed, a network cut healed) trims what it had stored here before it uses
 * the server again; a write of the old session still queued in this server's socket buffer must not land
 * after that trim, where it could later pass for the data of a new replica.
 */
final class FencedSpace implements Backend {
    private final SpaceBackend space;
    private final int client;
    private final int session;
    private final IntSupplier latestSession;

    FencedSpace(SpaceBackend space, int client, int session, IntSupplier latestSession) {
        this.space = space;
        this.client = client;
        this.session = session;
        this.latestSession = latestSession;
    }

    private void checkCurrent() throws NbdErrorException {
        int latest = latestSession.getAsInt();
        if (latest != session) {
            throw new NbdErrorException(Nbd.ESHUTDOWN, "session " + session + " of client " + client
                + " is superseded by session " + latest);
        }
    }

    @Override public long size() { return space.size(); }
    @Override public Set<Capability> capabilities() { return space.capabilities(); }
    @Override public Set<Trait> traits() { return space.traits(); }
    @Override public String describe() { return space.describe(); }
    @Override public void read(long offset, ByteBuffer dst) throws IOException { space.read(offset, dst); }
    @Override public void flush() throws IOException { space.flush(); }
    @Override public List<Extent> extents(long offset, long length) throws IOException { return space.extents(offset, length); }
    @Override public void close() {} // the space outlives the connection; the registry frees it

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        checkCurrent();
        space.write(offset, src, fua);
    }

    @Override
    public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        checkCurrent();
        space.write(offset, srcs, fua);
    }

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        checkCurrent();
        space.trim(offset, length, fua);
    }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        checkCurrent();
        space.zero(offset, length, mayTrim, fast, fua);
    }
}
