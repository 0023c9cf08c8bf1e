package io.jnbd.server;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.io.BufferPool;
import java.nio.channels.FileChannel;
import java.util.concurrent.Executor;

/**
 * How one connection's requests reach its export, settled once when the client connects rather than guessed
 * per request: which of the backend's fast paths apply, where its blocking calls run, and where replies go.
 *
 * @param zeroCopySource the file reads are sent from by sendfile (a cached file export), or null
 * @param zeroCopyFd     that file's native descriptor, or -1 (then only the JDK's transferTo)
 * @param async          reads and writes are started here and answered from their completion (a network backend)
 * @param neverBlocks    backend calls cost CPU only (memory): run them on the reader, never hand them off
 * @param work           where blocking backend calls run: the I/O pool, or virtual threads for a remote backend
 */
record DataPath(Backend backend, FileChannel zeroCopySource, int zeroCopyFd, boolean async, boolean neverBlocks,
                Executor work, BufferPool buffers, Replies replies, ConnectionStats stats, ReplySink sink) {

    /** Where the pieces of the request path hand their replies. */
    interface ReplySink {
        /** Sends a reply part (see {@link ReplyWriter.Part}). */
        void emit(ReplyWriter.Part part);

        /** Ends a request that gets no reply because its connection is going. */
        void completed(InFlight f);
    }

    static DataPath of(Export export, Executor work, BufferPool buffers, Replies replies, ConnectionStats stats, ReplySink sink) {
        Backend b = export.backend();
        boolean zeroCopy = b.has(Backend.Trait.ZERO_COPY);
        return new DataPath(b, zeroCopy ? b.zeroCopySource() : null, zeroCopy ? b.zeroCopyFd() : -1,
            b.has(Backend.Trait.ASYNC), b.has(Backend.Trait.NEVER_BLOCKS), work, buffers, replies, stats, sink);
    }

    boolean zeroCopy() {
        return zeroCopySource != null;
    }
}
