package io.jnbd.client;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;

/**
 * Takes a read's data as the server sends it, chunk by chunk, instead of into one buffer: for a caller that
 * decides per chunk where the bytes go, such as a copy that passes them on to another server
 * ({@link Payload#spliceTo}) without their entering this process. See {@link NbdClient#read(long, long, ReadSink)}.
 *
 * <p>Both methods run on the connection's reader thread: every other reply on that connection waits
 * meanwhile, so they should not block for long. Chunks of one read may come in any order (the NBD spec lets a
 * server send structured reply chunks out of order), never overlapping, and together cover the read once it
 * succeeds. A read that fails may have delivered some chunks first; so may one that a reconnecting client
 * ({@link ClientOptions#withReconnect}) sends again, whose chunks then come a second time.
 */
public interface ReadSink {

    /**
     * {@code length} bytes of data at {@code offset} of the export. Before returning, the sink consumes them
     * with exactly one of {@link Payload#readFully} or {@link Payload#spliceTo}; bytes left unconsumed are
     * discarded. An exception thrown here fails the read (and, if it came from the middle of the payload, the
     * connection).
     */
    void data(long offset, int length, Payload payload) throws IOException;

    /** {@code length} bytes at {@code offset} that read as zeroes, which the server did not send (a hole chunk). */
    void zeroes(long offset, long length);

    /** One data chunk's bytes, still in the connection. Valid only during {@link #data}. */
    interface Payload {

        /**
         * Copies the chunk's first bytes into {@code dst} without consuming them: up to {@code dst.remaining()},
         * no more than the chunk holds, and at most 4 KiB; waits for them to arrive. Advances {@code dst}'s position.
         */
        void peek(ByteBuffer dst) throws IOException;

        /** Consumes the whole chunk into {@code dst}, which must have exactly the chunk's length remaining. */
        void readFully(ByteBuffer dst) throws IOException;

        /**
         * Consumes the whole chunk by writing it at {@code dstOffset} of {@code dst} as one NBD WRITE whose payload
         * the kernel moves from this connection's socket to the destination's ({@code splice(2)}): it never
         * enters this process. Blocks until the payload is sent (not until the destination has answered: that
         * is the future). Only where {@link NbdClient#canSpliceTo} said yes, and for a range the destination
         * accepts in one request ({@link NbdClient#canWriteInOne}).
         *
         * <p>The future is the write's: it fails if the destination does, and this connection goes on (what was
         * left of the payload is read and dropped). If this connection fails in the middle of the payload, the
         * destination's request is completed with zeroes so that its connection goes on, the future fails all
         * the same, and so does the read. A failure here therefore never costs the side that did not fail its
         * connection; only when both fail are both closed.
         */
        CompletableFuture<Void> spliceTo(NbdClient dst, long dstOffset) throws IOException;
    }
}
