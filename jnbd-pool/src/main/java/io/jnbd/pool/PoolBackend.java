package io.jnbd.pool;

import io.jnbd.client.SendBatch;
import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.NbdErrorException;
import io.jnbd.server.backend.StatusReporting;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * A pool volume served as an NBD export. Its calls wait on memory servers, so it is {@link Trait#REMOTE}: the
 * server runs each on a virtual thread, which parks while the volume's requests are out.
 */
public final class PoolBackend implements Backend, StatusReporting {
    private static final Set<Capability> CAPS = EnumSet.of(Capability.WRITE, Capability.FLUSH, Capability.FUA,
        Capability.TRIM, Capability.ZERO, Capability.FAST_ZERO, Capability.EXTENTS, Capability.MULTI_CONN);

    private final PoolVolume volume;
    /** The volume's request path, called straight from here: the forwarding of a request takes no detour. */
    private final ReplicatedIo io;
    /**
     * The volume's extent table lives in this process, and the memory servers free a client's memory when it goes:
     * a restarted pool export holds other data, whatever its name and size (see Backend#identity).
     */
    private final String identity = java.util.HexFormat.of().toHexDigits(new java.security.SecureRandom().nextLong());

    public PoolBackend(PoolVolume volume) {
        this.volume = volume;
        this.io = volume.io();
    }

    public PoolVolume volume() {
        return volume;
    }

    @Override public long size() { return volume.size(); }
    @Override public String identity() { return identity; }
    @Override public Set<Capability> capabilities() { return CAPS; }
    @Override public Set<Trait> traits() { return Set.of(Trait.REMOTE, Trait.ASYNC); }

    /**
     * The requests the server starts together go to the memory servers together: on each connection one write
     * for the batch, where one per request cost the serving process a system call each and woke the memory
     * server for each (issue 35).
     */
    @Override
    public void beginBatch() {
        SendBatch.begin();
    }

    @Override
    public void endBatch() {
        SendBatch.end();
    }

    @Override
    public CompletableFuture<Void> readAsync(long offset, ByteBuffer dst) {
        return nbdErrors(io.read(offset, dst));
    }

    @Override
    public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
        if (srcs.length == 1) return nbdErrors(io.write(offset, srcs[0]));
        List<CompletableFuture<Void>> parts = new ArrayList<>(srcs.length);
        long pos = offset;
        for (ByteBuffer b : srcs) {
            parts.add(io.write(pos, b));
            pos += b.remaining();
        }
        return nbdErrors(CompletableFuture.allOf(parts.toArray(CompletableFuture[]::new)));
    }

    /** A pool's failure as the NBD error it names, for the server's one mapping of failures (NbdErrors). */
    private static CompletableFuture<Void> nbdErrors(CompletableFuture<Void> f) {
        return f.exceptionallyCompose(e -> {
            Throwable cause = PoolVolume.unwrap(e);
            return CompletableFuture.failedFuture(cause instanceof PoolException p
                ? new NbdErrorException(p.error(), p.getMessage()) : cause);
        });
    }

    @Override
    public String describe() {
        PoolConfig c = volume.config();
        return "pool over " + c.servers().size() + " memory servers, " + c.replicas() + " copies of each "
            + (c.extentSize() >> 10) + " KiB extent";
    }

    @Override
    public void read(long offset, ByteBuffer dst) throws IOException {
        await(io.read(offset, dst));
        dst.position(dst.limit());
    }

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        await(io.write(offset, src));
        src.position(src.limit());
    }

    @Override
    public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        List<CompletableFuture<Void>> parts = new ArrayList<>(srcs.length);
        long pos = offset;
        for (ByteBuffer b : srcs) {
            parts.add(io.write(pos, b));
            pos += b.remaining();
        }
        await(CompletableFuture.allOf(parts.toArray(CompletableFuture[]::new)));
        for (ByteBuffer b : srcs) b.position(b.limit());
    }

    @Override
    public void flush() throws IOException {
        await(io.flush());
    }

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        await(io.trim(offset, length));
    }

    /** A memory server keeps no zero pages: zeroing is discarding, as fast as it gets. */
    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        await(io.trim(offset, length));
    }

    /** Extents never written (or trimmed whole) are holes that read as zeroes; the rest is data. */
    @Override
    public List<Extent> extents(long offset, long length) {
        List<Extent> out = new ArrayList<>();
        long es = volume.config().extentSize(), end = offset + length;
        for (long pos = offset; pos < end && out.size() < 65536; ) {
            long next = Math.min(end, (pos / es + 1) * es);
            boolean hole = volume.extent((int) (pos / es)) == null;
            if (!out.isEmpty() && out.getLast().hole() == hole) {
                out.add(new Extent(out.removeLast().length() + next - pos, hole, hole));
            } else {
                out.add(new Extent(next - pos, hole, hole));
            }
            pos = next;
        }
        return out;
    }

    @Override
    public byte[] statusJson() {
        return volume.status().toJson();
    }

    @Override
    public void close() {
        volume.close();
    }

    private static void await(CompletableFuture<Void> f) throws IOException {
        SendBatch.sendHeld(); // what this waits for may be held in the server's batch
        try {
            f.join();
        } catch (CompletionException e) {
            Throwable cause = PoolVolume.unwrap(e);
            if (cause instanceof PoolException p) throw new NbdErrorException(p.error(), p.getMessage());
            if (cause instanceof IOException failure) throw new NbdErrorException(Nbd.EIO, failure.getMessage());
            throw new NbdErrorException(Nbd.EIO, String.valueOf(cause));
        } catch (java.util.concurrent.CancellationException e) {
            throw new InterruptedIOException("pool request cancelled");
        }
    }
}
