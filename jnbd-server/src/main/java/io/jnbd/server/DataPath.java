package io.jnbd.server;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.ConnectionContext;
import io.jnbd.server.io.BufferPool;
import io.jnbd.server.io.PageCacheSource;
import java.util.concurrent.Executor;

/**
 * How one connection's requests reach its export, settled once when the client connects rather than guessed
 * per request: which of the backend's fast paths apply, where its blocking calls run, and where replies go.
 *
 * @param backend        the export's view for this connection ({@link Backend#forConnection}): every request of the
 *                       connection goes to it, on every route
 *
 * @param zeroCopySource the file reads are sent from by sendfile (a cached file export on a transport that can), or
 *                       null: under TLS every byte must pass through the JVM to be encrypted, so reads go into pool
 *                       buffers as any other backend's do
 * @param cachedReads    the chain answers reads from memory it holds without waiting ({@link Backend#readIfCached}),
 *                       whatever the transport: small reads try that on the reader before handing off to an I/O thread
 * @param async          reads and writes are started here and answered from their completion (a network backend)
 * @param neverBlocks    backend calls cost CPU only (memory): run them on the reader, never hand them off
 * @param plainTransport the connection's bytes cross the socket as they are (no TLS)
 * @param work           where blocking backend calls run: the I/O pool, or virtual threads for a remote backend
 */
record DataPath(Backend backend, PageCacheSource zeroCopySource, boolean cachedReads, boolean async,
                boolean neverBlocks, boolean plainTransport, Executor work, BufferPool buffers, Replies replies, ConnectionStats stats,
                ReplySink sink) {

    /** Where the pieces of the request path hand their replies. */
    interface ReplySink {
        /** Sends a reply part (see {@link ReplyWriter.Part}). */
        void emit(ReplyWriter.Part part);

        /** Ends a request that gets no reply because its connection is going. */
        void completed(InFlight f);

        /** Closes the connection: a reply already begun cannot say what went wrong (see SplitRead). */
        void abort(String why);

        /** False once nothing more reaches the client: work still to start for it can be left undone. */
        boolean open();
    }

    /**
     * The path of a connection that has just entered transmission. Its requests go to the export's view for this
     * connection ({@link Backend#forConnection}), which the connection must end with {@link Backend#connectionClosed};
     * the route is chosen from the export's chain, as its tuning and executor were, and the view must agree with it.
     * {@code zeroCopyTransport}: the connection's transport sends files without copying them (see
     * Transport.zeroCopyFiles). {@code context}: who the connection is, as the handshake found (see Session).
     */
    static DataPath of(Export export, ConnectionContext context, boolean zeroCopyTransport, Executor work, BufferPool buffers,
                       Replies replies, ConnectionStats stats, ReplySink sink) {
        Backend chain = export.backend();
        PageCacheSource pageCache = chain.has(Backend.Trait.ZERO_COPY) ? chain.pageCache() : null;
        Backend view = chain.forConnection(context);
        // A view on another route than its export's would skip a filter (sendfile past it) or wait where nothing may.
        if (!view.traits().equals(chain.traits()) || view.pageCache() != chain.pageCache()) {
            view.connectionClosed();
            throw new IllegalStateException("the view of " + chain.describe() + " for a connection has traits " + view.traits()
                + ", the export " + chain.traits() + ": a filter's forConnection must keep them");
        }
        return new DataPath(view, zeroCopyTransport ? pageCache : null, chain.has(Backend.Trait.CACHED_READS),
            chain.has(Backend.Trait.ASYNC), chain.has(Backend.Trait.NEVER_BLOCKS), zeroCopyTransport, work, buffers, replies,
            stats, sink);
    }

    /**
     * How this connection's reads and writes reach the backend, fixed when it connects: what {@link Placement}
     * decides where they run from.
     */
    enum Strategy {
        /** A cached file over a transport that sends files: reads leave by sendfile, writes land in the page cache. */
        PAGE_CACHE,
        /** A network backend: reads and writes are started and completed without a thread waiting for them. */
        ASYNC,
        /** Memory: every call costs CPU only. */
        IN_MEMORY,
        /** Anything else: calls that wait for a disk, on the workers. */
        BLOCKING
    }

    Strategy strategy() {
        if (zeroCopy()) return Strategy.PAGE_CACHE;
        if (async) return Strategy.ASYNC;
        return neverBlocks ? Strategy.IN_MEMORY : Strategy.BLOCKING;
    }

    boolean zeroCopy() {
        return zeroCopySource != null;
    }

    /**
     * Whether this connection's writes (without FUA) only land in the page cache: a cached file's, where reads go
     * zero-copy, and a chain that answers reads from the page cache ({@code cachedReads}: a cow overlay over a cached
     * file, which writes its overlay's data file the same way). Such writes are quicker done on the reader than by
     * a hand-off to an I/O thread (see Placement). Not under TLS, where the reader spends a core decrypting the next
     * payload and the write is better done on the other one meanwhile.
     */
    boolean writesToPageCache() {
        return zeroCopy() || cachedReads && plainTransport;
    }
}
