package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

/**
 * What one connection may hold at once: a window of requests in flight, and a bound on the block data
 * buffered for them, so that one client cannot take the whole of the server's buffer budget. A request holds
 * its share from the moment it is read until its reply is on the wire.
 */
final class Window {
    private static final int CONNECTION_BUFFER_BYTES = 64 << 20;

    private final int size;
    private final Semaphore requests;
    /** In 4 KiB units. */
    private final Semaphore bytes = new Semaphore(CONNECTION_BUFFER_BYTES / 4096);
    private final ConnectionStats stats;

    Window(int size, ConnectionStats stats) {
        this.size = size;
        this.requests = new Semaphore(size);
        this.stats = stats;
    }

    /**
     * Requests that hold an off-heap buffer while in flight (a write payload, or a read not sent by sendfile);
     * a streamed request (Export.streamed) holds only the pieces it has in memory at once.
     */
    static int bytePermits(Request r, boolean zeroCopy, boolean streamed) {
        boolean buffered = r.type() == Nbd.CMD_WRITE || (r.type() == Nbd.CMD_READ && !zeroCopy);
        long held = streamed ? Math.min(r.length(), Export.STREAM_BYTES) : r.length();
        return buffered ? (int) Math.max(1, (held + 4095) / 4096) : 0;
    }

    /**
     * Takes a request's share, first without waiting, else after {@code beforeWaiting} (which must hand over
     * the requests not yet submitted: their shares would never come back while this one waits).
     */
    void acquire(InFlight f, Runnable beforeWaiting) throws InterruptedException {
        if (!requests.tryAcquire()) {
            beforeWaiting.run();
            requests.acquire();
        }
        if (f.bytePermits > 0 && !bytes.tryAcquire(f.bytePermits)) {
            beforeWaiting.run();
            bytes.acquire(f.bytePermits);
        }
    }

    /** The last part of a request's reply is on the wire (or the connection is gone). */
    void completed(InFlight f) {
        f.releasePayload();
        if (f.bytePermits > 0) bytes.release(f.bytePermits);
        requests.release();
        stats.completed(f.timing, System.nanoTime());
    }

    /**
     * Gives back a request's share at once, without counting it as served: a request refused during a drain,
     * whose reply then completes nothing (see Replies#refusal), so that the drain sees only what it waits for.
     */
    void release(InFlight f) {
        if (f.bytePermits > 0) bytes.release(f.bytePermits);
        requests.release();
    }

    /**
     * For the connection's reader, holding one request's share: waits until every other request is answered,
     * runs {@code start} (which begins that request), and waits until it is answered too, so that nothing else
     * is in flight meanwhile. The reader reads no request while it waits.
     */
    void alone(Runnable start) throws InterruptedException {
        requests.acquire(size - 1);
        try {
            start.run();
            requests.acquire();
            requests.release();
        } finally {
            requests.release(size - 1);
        }
    }

    /** Requests read and not yet answered in full. */
    int inFlight() {
        return size - requests.availablePermits();
    }

    /** Waits up to {@code seconds} until every request has been answered. */
    void drain(long seconds) throws InterruptedException {
        if (requests.tryAcquire(size, seconds, TimeUnit.SECONDS)) requests.release(size);
    }
}
