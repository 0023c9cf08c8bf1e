package io.jnbd.proxy;

import io.jnbd.client.ExportInfo;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdConnectionException;
import io.jnbd.client.SendBatch;
import io.jnbd.client.NbdProtocolException;
import io.jnbd.client.NbdTimeoutException;
import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BlockSizes;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.NbdErrorException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.Function;

/**
 * Another NBD server's export, served through jnbd's client. Reads and writes are {@link Trait#ASYNC}: the
 * server starts them on its connection thread and the client's reader completes them, placing read data
 * straight into the server's reply buffer. Every other call waits on the upstream, so the backend is
 * {@link Trait#REMOTE}.
 *
 * <p>What the export offers is what the upstream offered in its first handshake. An upstream error is passed
 * on as the same NBD error; a lost, stuck or misbehaving upstream is EIO for the requests it had, and the next
 * request connects again (see {@link Upstream}).
 */
final class NbdBackend implements Backend {
    private final Upstream upstream;
    private final Set<Capability> capabilities;
    private final BlockSizes blockSizes;

    NbdBackend(Upstream upstream, boolean readOnly) {
        this.upstream = upstream;
        this.capabilities = capabilities(upstream.info(), readOnly);
        this.blockSizes = blockSizes(upstream.info());
    }

    private static Set<Capability> capabilities(ExportInfo info, boolean readOnly) {
        // Every connection to this export shares the upstream's connections: writes one of them completed are
        // seen, and flushed, by all, whether there is one upstream connection or several to a CAN_MULTI_CONN server.
        Set<Capability> caps = EnumSet.of(Capability.MULTI_CONN);
        if (info.canFlush()) caps.add(Capability.FLUSH);
        if (info.canCache()) caps.add(Capability.CACHE);
        if (info.baseAllocation()) caps.add(Capability.EXTENTS);
        if (readOnly || info.readOnly()) return caps;
        caps.add(Capability.WRITE);
        if (info.canFua()) caps.add(Capability.FUA);
        if (info.canTrim()) caps.add(Capability.TRIM);
        if (info.canWriteZeroes()) caps.add(Capability.ZERO);
        if (info.canWriteZeroes() && info.canFastZero()) caps.add(Capability.FAST_ZERO);
        return caps;
    }

    /** The upstream's constraints, raised where jnbd's own floor for them is higher (the client splits the rest). */
    private static BlockSizes blockSizes(ExportInfo info) {
        int min = Math.min(info.minimumBlockSize(), 65536);
        int preferred = Math.max(Integer.highestOneBit(Math.max(info.preferredBlockSize(), 1)), Math.max(min, 512));
        long max = Math.min(info.maximumPayload(), Nbd.DEFAULT_MAX_PAYLOAD);
        return new BlockSizes(min, preferred, (int) Math.max(max, preferred));
    }

    /** Upstream connections opened at the start: for tests and the log. */
    int upstreamConnections() {
        return upstream.connections();
    }

    /** Whether the upstream is connected now: for tests. */
    boolean upstreamConnected() {
        return upstream.connected();
    }

    @Override public long size() { return upstream.info().size(); }
    @Override public Set<Capability> capabilities() { return capabilities; }
    @Override public BlockSizes blockSizes() { return blockSizes; }
    @Override public Set<Trait> traits() { return Set.of(Trait.REMOTE, Trait.ASYNC); }

    /**
     * The requests the server starts together go upstream together, one write for the batch: one each cost a
     * system call and woke the upstream server for each.
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
        return send(c -> c.read(offset, dst));
    }

    @Override
    public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
        if (srcs.length == 1) return send(c -> c.write(offset, srcs[0], fua));
        return send(c -> {
            List<CompletableFuture<Void>> parts = new ArrayList<>(srcs.length);
            long pos = offset;
            for (ByteBuffer b : srcs) {
                int n = b.remaining();
                parts.add(c.write(pos, b, fua));
                pos += n;
            }
            // allOf completes only once every part has: none is still reading a buffer the server may reuse.
            return CompletableFuture.allOf(parts.toArray(CompletableFuture[]::new));
        });
    }

    @Override
    public void read(long offset, ByteBuffer dst) throws IOException {
        int end = dst.limit();
        await(readAsync(offset, dst));
        dst.position(end);
    }

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        int end = src.limit();
        await(send(c -> c.write(offset, src, fua)));
        src.position(end);
    }

    @Override
    public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        await(writeAsync(offset, srcs, fua));
        for (ByteBuffer b : srcs) b.position(b.limit());
    }

    @Override
    public void flush() throws IOException {
        await(send(NbdClient::flush));
    }

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        await(send(c -> c.trim(offset, length, fua)));
    }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        await(send(c -> c.writeZeroes(offset, length, !mayTrim, fast, fua)));
    }

    @Override
    public void cache(long offset, long length) throws IOException {
        await(send(c -> c.cache(offset, length)));
    }

    @Override
    public List<Extent> extents(long offset, long length) throws IOException {
        if (!capabilities.contains(Capability.EXTENTS)) return List.of(new Extent(length, false, false));
        List<io.jnbd.client.Extent> upstreamExtents = await(send(c -> c.blockStatus(offset, length)));
        List<Extent> out = new ArrayList<>(upstreamExtents.size());
        for (io.jnbd.client.Extent e : upstreamExtents) out.add(new Extent(e.length(), e.hole(), e.zero()));
        if (out.isEmpty()) throw new NbdErrorException(Nbd.EIO, "upstream " + upstream.uri() + " described no extent at " + offset);
        return out;
    }

    @Override
    public String describe() {
        return "nbd:" + upstream.uri() + " (" + upstream.connections() + (upstream.connections() == 1 ? " connection)" : " connections)");
    }

    @Override
    public void close() {
        upstream.close();
    }

    /**
     * Sends one request with the current client. Its failure becomes the NBD error the server replies with: the
     * upstream's own error as it is, anything else EIO; a failure that says the connection is gone or stuck
     * drops it, so that the next request connects again.
     */
    private <T> CompletableFuture<T> send(Function<NbdClient, CompletableFuture<T>> request) {
        CompletableFuture<NbdClient> client = upstream.client();
        if (client.isDone() && !client.isCompletedExceptionally()) return sendWith(client.join(), request);
        return client.handle((c, e) -> e == null ? sendWith(c, request) : CompletableFuture.<T>failedFuture(away(unwrap(e))))
            .thenCompose(f -> f);
    }

    private <T> CompletableFuture<T> sendWith(NbdClient c, Function<NbdClient, CompletableFuture<T>> request) {
        CompletableFuture<T> f;
        try {
            f = request.apply(c);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        return f.exceptionallyCompose(e -> CompletableFuture.failedFuture(nbdError(c, unwrap(e))));
    }

    /** No client to send with: the export is closing, or the attempt to connect failed. */
    private NbdErrorException away(Throwable t) {
        return t instanceof NbdErrorException e ? e
            : new NbdErrorException(Nbd.EIO, "upstream " + upstream.uri() + " is away: " + t.getMessage());
    }

    private NbdErrorException nbdError(NbdClient client, Throwable t) {
        if (t instanceof NbdErrorException e) return e;
        if (t instanceof io.jnbd.client.NbdErrorException e) return new NbdErrorException(e.error(), e.getMessage());
        // The client's own checks: a request off the upstream's alignment, from a client that agreed no block sizes.
        if (t instanceof IllegalArgumentException) return new NbdErrorException(Nbd.EINVAL, t.getMessage());
        if (t instanceof NbdConnectionException || t instanceof NbdTimeoutException || t instanceof NbdProtocolException) {
            upstream.lost(client, t);
        }
        return new NbdErrorException(Nbd.EIO, "upstream " + upstream.uri() + ": " + t.getMessage());
    }

    private static Throwable unwrap(Throwable e) {
        while (e instanceof CompletionException && e.getCause() != null) e = e.getCause();
        return e;
    }

    private static <T> T await(CompletableFuture<T> f) throws IOException {
        SendBatch.sendHeld(); // what this waits for may be held in the server's batch
        try {
            return f.join();
        } catch (CompletionException e) {
            Throwable cause = unwrap(e);
            if (cause instanceof IOException io) throw io;
            throw new NbdErrorException(Nbd.EIO, String.valueOf(cause));
        } catch (CancellationException e) {
            throw new InterruptedIOException("upstream request cancelled");
        }
    }
}
