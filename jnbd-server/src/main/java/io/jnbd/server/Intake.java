package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.ProtocolException;
import io.jnbd.protocol.Request;
import io.jnbd.server.io.BufferPool;
import io.jnbd.server.io.InputBuffers;
import io.jnbd.server.net.Transport;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * What one connection receives in the transmission phase: request headers and write payloads, from its
 * transport into an input buffer and into buffers of the server's pool.
 *
 * <p>Three rules keep a client from holding what other clients need. The input buffer is lent from a shared
 * pool only while there is something to read: a connection idle between requests, or waiting for the rest of
 * a header, gives it back (the few header bytes it has are kept aside). A payload's buffers are leased piece by
 * piece, each only once that piece's bytes have arrived (until then they wait in the kernel's socket buffer),
 * so a client that announces a large write and sends little of it holds nothing of the pool. And a client that
 * stops sending in the middle of a request, a header or a payload, shows in {@link #stalledNanos}, which the
 * server's watchdog holds against the receive timeout. A client idle between requests does not (the kernel's
 * nbd connections sit idle for hours), nor does time this thread spends waiting for the server: for a buffer,
 * for a permit of the window.
 *
 * <p>Three rules for speed. One receive takes in every request the client has sent so far. After a large
 * payload only the next header is read, so that the payload likely behind it goes from the socket straight
 * into its own buffer instead of being copied twice. Large payloads are received with the socket's low-water
 * mark raised to the piece, so the kernel wakes this thread once per piece instead of once per segment: those
 * wake-ups are paid for by the client's sending thread, which sets the pace of a stream of large writes.
 */
final class Intake {
    /** Payloads from this size are received piece by piece, with a raised low-water mark; smaller ones through the input buffer. */
    static final int LARGE_PAYLOAD = 128 * 1024;
    /** The largest piece of a payload, and the most the low-water mark is raised to. */
    static final int PIECE = 1 << 20;
    private static final ByteBuffer NONE = ByteBuffer.allocateDirect(0);

    /** Hands out a pool buffer of {@code size} bytes, waiting for the budget if it must. */
    interface Leaser {
        BufferPool.Lease lease(int size) throws InterruptedException;
    }

    /** Takes a full piece: its buffer has position 0 and limit at its length; the sink now owns the lease. */
    interface PieceSink {
        void accept(long offsetInPayload, BufferPool.Lease piece);
    }

    private interface Receiver {
        int receive(ByteBuffer into) throws IOException;
    }

    private final Transport transport;
    private final InputBuffers inputs;
    private final BusyPoll poll;
    /**
     * How long a wait on a raised low-water mark lasts before the socket is asked directly (see awaitArrival):
     * well inside the receive timeout, so that a client sending slowly shows its progress in time.
     */
    private final int checkMillis;
    /** Received and not yet parsed, position to limit; {@link #NONE} while no buffer is lent. */
    private ByteBuffer in = NONE;
    /** The start of a header kept aside while the input buffer is given back. */
    private final byte[] carried = new byte[Nbd.REQUEST_SIZE];
    private int carriedLength;
    /** Set after a header announcing a large payload: the next read of the input buffer takes one header only. */
    private boolean headerOnly;
    /** System.nanoTime() since which this thread has waited for the client in the middle of a request, or 0. */
    private volatile long waitingSince;

    Intake(Transport transport, InputBuffers inputs, long busyPollNanos, java.time.Duration receiveTimeout) {
        this.transport = transport;
        this.inputs = inputs;
        this.poll = new BusyPoll(transport, busyPollNanos);
        this.checkMillis = (int) Math.clamp(receiveTimeout.toMillis() / 4, 10, 1000);
    }

    /** The next request whose header is in the input buffer, or null when {@link #fill} must read more first. */
    Request next() throws ProtocolException {
        if (in.remaining() < Nbd.REQUEST_SIZE) return null;
        Request r = Request.decode(in);
        headerOnly = r.hasPayload() && r.length() >= LARGE_PAYLOAD;
        poll.afterLargePayload(headerOnly);
        return r;
    }

    /**
     * Waits for more from the client; returns false at a clean end of stream between requests. {@code mayPoll}:
     * busy-poll first (see BusyPoll), worth it only when no request of this connection is being served.
     */
    boolean fill(boolean mayPoll) throws IOException {
        if (mayPoll && in != NONE && !in.hasRemaining()) {
            int n = fillWith(poll::poll);
            if (n != 0) return n > 0 || endOfStream();
        }
        while (true) {
            boolean midRequest = in.hasRemaining() || carriedLength > 0;
            if (midRequest && !transport.canWaitForArrival()) {
                int n = fillWith(b -> receive(b, true));
                return n > 0 || endOfStream();
            }
            if (transport.canWaitForArrival()) {
                // A busy client has usually sent more already: one receive, and no wait at all.
                int n = fillWith(transport::receiveNow);
                if (n != 0) return n > 0 || endOfStream();
            }
            // Less than a header is here (else the caller would have parsed it): wait holding no buffer.
            putAside();
            waitingSince = midRequest ? System.nanoTime() : 0;
            try {
                transport.awaitReadable(0);
            } finally {
                waitingSince = 0;
            }
            if (!transport.canWaitForArrival()) {
                int n = fillWith(transport::receiveNow); // the byte the wait received ahead, at least
                if (n != 0) return n > 0 || endOfStream();
            }
        }
    }

    /** Gives the input buffer back when the connection stops, and whenever it waits with nothing to parse. */
    void release() {
        if (in == NONE) return;
        inputs.give(in);
        in = NONE;
    }

    /**
     * Receives a payload of {@code length} bytes into pool buffers of at most {@code pieceSize} bytes, handing
     * each to {@code sink} as soon as it is full. A buffer is leased only once its piece has arrived; on failure
     * the piece being received is released, and the pieces already handed over are the sink's.
     */
    void receivePayload(long length, int pieceSize, Leaser leaser, PieceSink sink)
            throws IOException, InterruptedException {
        // A small payload is read through the input buffer, unless its request announced a large one: then the
        // input buffer takes one header at a time (headerOnly), and a split write's short first piece goes
        // into a piece of its own like the rest.
        if (length < LARGE_PAYLOAD && !headerOnly) {
            while (in.remaining() < length) readMorePayload();
            BufferPool.Lease lease = leaser.lease((int) length);
            lease.buffer().put(in.slice(in.position(), (int) length)).flip();
            in.position(in.position() + (int) length);
            sink.accept(0, lease);
            return;
        }
        try {
            for (long done = 0; done < length; ) {
                int size = (int) Math.min(pieceSize, length - done);
                int buffered = Math.min(in.remaining(), size);
                awaitArrival(size - buffered);
                BufferPool.Lease lease = leaser.lease(size);
                try {
                    ByteBuffer dst = lease.buffer();
                    dst.put(in.slice(in.position(), buffered));
                    in.position(in.position() + buffered);
                    receiveRest(dst);
                    dst.flip();
                } catch (IOException | RuntimeException e) {
                    lease.release();
                    throw e;
                }
                sink.accept(done, lease);
                done += size;
            }
        } finally {
            // A receive on a raised mark could wait for bytes the client does not owe.
            resetLowWater();
        }
    }

    /** Reads and drops {@code length} bytes of payload (a write refused before its payload was read). */
    void discard(long length) throws IOException {
        int buffered = (int) Math.min(in.remaining(), length);
        in.position(in.position() + buffered);
        long left = length - buffered;
        if (left == 0) return;
        lend();
        while (left > 0) {
            in.clear().limit((int) Math.min(in.capacity(), left));
            int n = receive(in, true);
            if (n < 0) throw new EOFException("peer closed the connection in the middle of a write payload");
            left -= n;
        }
        in.position(0).limit(0);
    }

    /** How long the client has kept this connection waiting in the middle of a request, in nanoseconds; 0 if it has not. */
    long stalledNanos(long now) {
        long since = waitingSince;
        return since == 0 ? 0 : now - since;
    }

    private boolean endOfStream() throws EOFException {
        if (in.hasRemaining()) throw new EOFException("peer closed the connection in the middle of a request");
        return false;
    }

    /** Makes room behind the unparsed bytes, receives into it with {@code r}, and returns what {@code r} did. */
    private int fillWith(Receiver r) throws IOException {
        lend();
        in.compact();
        if (headerOnly) in.limit(Nbd.REQUEST_SIZE); // compact moved what is left of a header to 0
        int n = r.receive(in);
        in.flip();
        return n;
    }

    /** Makes sure a buffer is lent, holding what was put aside. */
    private void lend() {
        if (in != NONE) return;
        in = inputs.take();
        in.put(carried, 0, carriedLength).flip();
        carriedLength = 0;
    }

    /** Keeps the unparsed bytes (less than a header) aside and gives the buffer back. */
    private void putAside() {
        if (in == NONE) return;
        carriedLength = in.remaining();
        in.get(carried, 0, carriedLength);
        release();
    }

    /** A receive that waits; {@code forClient}: the bytes are owed (a request has begun). */
    private int receive(ByteBuffer into, boolean forClient) throws IOException {
        waitingSince = forClient ? System.nanoTime() : 0;
        try {
            return transport.receive(into);
        } finally {
            waitingSince = 0;
        }
    }

    /** More of a small payload into the input buffer, which has room: such a payload is under half its size. */
    private void readMorePayload() throws IOException {
        int n = fillWith(b -> receive(b, true));
        if (n < 0) throw new EOFException("peer closed the connection in the middle of a write payload");
    }

    /**
     * Waits until {@code bytes} more of the payload (at most one low-water mark's worth) wait in the socket. The
     * raised mark hides progress, so each time the wait runs out the socket is asked how much it holds: that
     * also covers a wake-up the kernel might not give.
     */
    private void awaitArrival(int bytes) throws IOException {
        if (bytes <= 0 || !transport.canWaitForArrival()) return;
        int want = Math.min(bytes, PIECE);
        transport.lowWater(want);
        waitingSince = System.nanoTime();
        try {
            int queued = 0;
            while (!transport.awaitReadable(checkMillis)) {
                int now = transport.pending();
                if (now >= want) return;
                if (now > queued) waitingSince = System.nanoTime();
                queued = now;
            }
        } finally {
            waitingSince = 0;
        }
    }

    /** Fills {@code dst} from the socket: receives that do not wait, waiting on the low-water mark between them. */
    private void receiveRest(ByteBuffer dst) throws IOException {
        waitingSince = System.nanoTime();
        try {
            if (!transport.canWaitForArrival()) {
                while (dst.hasRemaining()) {
                    if (transport.receive(dst) < 0) throw new EOFException("peer closed the connection in the middle of a write payload");
                    waitingSince = System.nanoTime();
                }
                return;
            }
            while (dst.hasRemaining()) {
                int n = transport.receiveNow(dst);
                if (n < 0) throw new EOFException("peer closed the connection in the middle of a write payload");
                if (n > 0) {
                    waitingSince = System.nanoTime();
                    continue;
                }
                // Never above what is still to come: the wait would be for bytes the client does not owe.
                transport.lowWater(Math.min(dst.remaining(), PIECE));
                transport.awaitReadable(checkMillis);
            }
        } finally {
            waitingSince = 0;
        }
    }

    private void resetLowWater() {
        try {
            transport.lowWater(1);
        } catch (IOException e) {
            // the socket is going away; a failure to reset must not hide why
        }
    }
}
