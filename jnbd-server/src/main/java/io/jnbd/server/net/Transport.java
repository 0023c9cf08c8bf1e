package io.jnbd.server.net;

import io.jnbd.server.io.PageCacheSource;
import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * Every byte a connection exchanges with its client passes through its transport: the handshake, requests,
 * payloads and replies. Request handling knows nothing of sockets, so another transport (TLS after
 * STARTTLS) can take a connection's place without touching it.
 *
 * <p>Receiving and sending may be done by two threads at once (a connection's reader and whoever sends
 * replies); each direction has one user at a time. Calls that wait park a virtual thread rather than block
 * its carrier.
 */
public interface Transport extends AutoCloseable {

    /** Receives at least one byte into {@code dst}, waiting for it; -1 at end of stream. */
    int receive(ByteBuffer dst) throws IOException;

    /** Receives what has arrived, without waiting: bytes received, 0 if none, -1 at end of stream. */
    int receiveNow(ByteBuffer dst) throws IOException;

    /**
     * Waits until the client has sent something (at least the low-water mark's worth, see {@link #lowWater}),
     * closed or failed, or {@code timeoutMillis} pass (0: no limit), without receiving it. False on timeout.
     * Without a limit it may return early (a stale wake-up): the caller's receive then finds nothing and waits
     * again.
     */
    boolean awaitReadable(long timeoutMillis) throws IOException;

    /** Bytes received and not yet taken, or -1 if this transport cannot tell. */
    int pending() throws IOException;

    /**
     * Asks to be woken only once {@code bytes} have arrived (SO_RCVLOWAT), so that a large payload costs one
     * wake-up instead of one per segment. A hint: transports without it wake for every arrival.
     */
    void lowWater(int bytes) throws IOException;

    /**
     * Whether {@link #receiveNow} and {@link #pending} work as described and {@link #awaitReadable} honours a
     * raised low-water mark; without them a receiver simply calls {@link #receive}.
     */
    boolean canWaitForArrival();

    /** Sends every remaining byte of {@code srcs} in order, waiting for room as needed. */
    void send(ByteBuffer... srcs) throws IOException;

    /** Sends what fits without waiting; returns the bytes sent (0 when full), positions advanced. */
    long sendNow(ByteBuffer... srcs) throws IOException;

    /** Sends {@code header}, then {@code length} bytes of {@code file} from {@code position}, by sendfile where it can. */
    void sendFile(ByteBuffer header, PageCacheSource file, long position, long length) throws IOException;

    /**
     * Whether {@link #sendFile} moves file bytes to the socket without copying them through memory (sendfile).
     * When it cannot (TLS must encrypt them), reads are better read into pool buffers like any other.
     */
    boolean zeroCopyFiles();

    /**
     * {@link System#nanoTime()} when bytes last left through this transport, 0 if none have: a client that reads
     * slowly but steadily is not one that stopped reading.
     */
    long lastSentNanos();

    /**
     * {@link System#nanoTime()} since which a receive has waited for bytes the client owes beneath the NBD
     * messages (the rest of a TLS record it began), or 0: the connection's own accounting of partial requests
     * cannot see them.
     */
    default long owedSince() {
        return 0;
    }

    /**
     * Sizes the socket's send queue for the transmission phase: {@code bufferBytes} for SO_SNDBUF (0 leaves the
     * kernel's autotuning) and {@code unsentLimit} for the bytes it may hold that the client's window has not
     * yet taken (0: no limit). Hints: a transport that has no such socket ignores them.
     */
    default void sizeSendQueue(int bufferBytes, int unsentLimit) {}

    /** Whether {@link #sendNow} can send at all: false means it always returns 0 and replies queue for a sender. */
    boolean canSendNow();

    /** Stops receiving: a waiting receiver sees end of stream. From any thread. */
    void shutdownInput();

    /** Ends the connection in both directions, waking every waiter. From any thread; does not free the descriptor. */
    void shutdown();

    /** Frees the descriptor; only once no thread can be inside a call on it any more. */
    @Override
    void close();
}
