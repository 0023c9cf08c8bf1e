package io.jnbd.pool.memserver;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.NbdErrorException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;

/** One client's space on a memory server, stored in the server's {@link PageStore}. */
final class SpaceBackend implements Backend {
    private static final Set<Capability> CAPS = EnumSet.of(Capability.WRITE, Capability.FLUSH, Capability.FUA,
        Capability.TRIM, Capability.ZERO, Capability.FAST_ZERO, Capability.EXTENTS, Capability.MULTI_CONN);

    private final PageStore store;
    private final int space;
    private final Set<Trait> traits;

    SpaceBackend(PageStore store, int space) {
        this.store = store;
        this.space = space;
        // With a spill tier a read may wait for the disk; without one every call is a copy in RAM.
        this.traits = store.spillBytes() > 0 ? Set.of() : Set.of(Trait.NEVER_BLOCKS);
    }

    @Override public long size() { return SpaceName.SPACE_BYTES; }
    @Override public Set<Capability> capabilities() { return CAPS; }
    @Override public Set<Trait> traits() { return traits; }
    @Override public String describe() { return "memory server space " + Integer.toHexString(space); }

    @Override
    public void read(long offset, ByteBuffer dst) throws IOException {
        store.read(space, offset, dst);
    }

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        try {
            store.write(space, offset, src);
        } catch (StoreFullException e) {
            throw new NbdErrorException(Nbd.ENOSPC, e.getMessage());
        }
    }

    @Override public void flush() {} // RAM and spill are not stable storage; a replica elsewhere is

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        store.discard(space, offset, length);
    }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        // Discarded pages read as zeroes and cost nothing, so even NO_HOLE is best served by a discard.
        store.discard(space, offset, length);
    }

    /** The most pages one block status call looks at: a reply may describe less than was asked, and the client asks again. */
    private static final long MAX_SCAN = 16384;

    @Override
    public List<Extent> extents(long offset, long length) {
        List<Extent> out = new ArrayList<>();
        long end = Math.min(offset + length, (offset / PageStore.PAGE + MAX_SCAN) * PageStore.PAGE), pos = offset;
        while (pos < end && out.size() < 65536) {
            long next = Math.min(end, (pos / PageStore.PAGE + 1) * PageStore.PAGE);
            boolean data = store.hasData(space, pos, next - pos);
            if (!out.isEmpty() && out.getLast().hole() == !data) {
                Extent last = out.removeLast();
                out.add(new Extent(last.length() + next - pos, !data, !data));
            } else {
                out.add(new Extent(next - pos, !data, !data));
            }
            pos = next;
        }
        return out;
    }

    @Override public void close() {} // the store outlives the spaces; the registry frees them
}
