package io.jnbd.server;

import io.jnbd.protocol.Request;

/**
 * A request between being read and its reply reaching the wire: what it holds of the connection's window
 * and byte budget, its write payload, and its timing.
 */
final class InFlight {
    final Request request;
    final ServerStats.Timing timing;
    final int bytePermits;
    /** The write payload, until the write is done; null for other commands and for writes split as they arrive. */
    Payload payload;

    InFlight(Request request, long receivedNanos, int bytePermits) {
        this.request = request;
        this.timing = new ServerStats.Timing(receivedNanos);
        this.bytePermits = bytePermits;
    }

    void releasePayload() {
        if (payload != null) {
            payload.release();
            payload = null;
        }
    }
}
