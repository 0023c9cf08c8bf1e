package io.jnbd.client;

import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * Where {@link NbdClient} sends requests: one {@link Connection}, or a {@link Redial} that puts a new connection in
 * place of one that dropped. The client picks among its lanes; it never learns which kind it has.
 */
interface Lane {

    /** As {@link Connection#submit(int, int, long, long, ByteBuffer)}. */
    CompletableFuture<Object> submit(int type, int flags, long offset, long length, ByteBuffer data);

    CompletableFuture<Object> submitWrite(int flags, long offset, long length, Pending.FileRegion file);

    CompletableFuture<Object> submitRead(long offset, long length, ReadSink sink);

    /** Sends a WRITE whose payload {@code streamer} puts into the socket now; only where {@link #spliceable()}. */
    CompletableFuture<Object> writeNow(int flags, long offset, long length, Sender.Streamer streamer) throws java.io.IOException;

    /** A request made now has somewhere to go (or to wait, while a connection is being put back). */
    boolean alive();

    /** Requests in flight or waiting, to pick the least busy lane. */
    int load();

    boolean spliceable();

    /** The TLS protocol and cipher suite, or null over a plain connection. */
    String tls();

    /** The socket now in use; null while there is none. */
    SocketChannel channel();

    List<String> metaContexts();

    ExportInfo info();

    /** Waits up to {@code graceMillis} for the requests in flight, then disconnects. */
    void close(long graceMillis);

    boolean lockedByCurrentThread();
}
