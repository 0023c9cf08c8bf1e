package io.jnbd.pool.memserver;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.NbdErrorException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Set;
import java.util.function.IntSupplier;

/**
 * One connection's view of a client's space: once a newer session of the same client instance has connected,
 * this connection's writes, trims and zeroes fail. A pool client that lost its connection to this server and
 * came back (the server hung and resumed, a network cut healed) trims what it had stored here before it uses
 * the server again; a write of the old session still queued in this server's socket buffer must not land
 * after that trim, where it could later pass for the data of a new replica.
 */
final class FencedSpace extends FilterBackend {
    private final int client;
    private final int session;
    private final IntSupplier latestSession;

    FencedSpace(SpaceBackend space, int client, int session, IntSupplier latestSession) {
        super(space);
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

    /**
     * The space's own but those whose paths would skip the fence (asynchronous writes, the page cache): the fence
     * acts on the synchronous writes, trims and zeroes, and waits for nothing.
     */
    @Override
    public Set<Trait> traits() {
        Set<Trait> t = java.util.EnumSet.noneOf(Trait.class);
        t.addAll(inner.traits());
        t.removeAll(Set.of(Trait.ASYNC, Trait.ZERO_COPY, Trait.CACHED_READS));
        return t;
    }
    @Override public void close() {} // the space outlives the connection; the registry frees it

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        checkCurrent();
        inner.write(offset, src, fua);
    }

    @Override
    public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        checkCurrent();
        inner.write(offset, srcs, fua);
    }

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        checkCurrent();
        inner.trim(offset, length, fua);
    }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        checkCurrent();
        inner.zero(offset, length, mayTrim, fast, fua);
    }
}
