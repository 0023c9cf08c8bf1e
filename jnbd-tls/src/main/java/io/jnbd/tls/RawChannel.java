package io.jnbd.tls;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * The plain byte stream TLS runs over: a connection's socket after the NBD handshake reached STARTTLS. The server
 * adapts its transport to it, the client its socket channel.
 *
 * <p>One thread may read while another writes.
 *
 * <p>The buffers passed in are heap buffers holding whole TLS records (up to four per write): an adapter over
 * native I/O that needs direct memory should bounce through a direct buffer of its own, kept per connection.
 */
public interface RawChannel {
    /** Reads at least one byte into {@code dst}, waiting for it; -1 at end of stream. */
    int read(ByteBuffer dst) throws IOException;

    /** Writes every remaining byte of {@code src}, waiting for room as needed. */
    void write(ByteBuffer src) throws IOException;
}
