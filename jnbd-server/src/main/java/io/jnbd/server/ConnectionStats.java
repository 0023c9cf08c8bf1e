package io.jnbd.server;

import java.util.concurrent.atomic.LongAdder;

/** Counters of one connection, logged when it ends. */
final class ConnectionStats {
    final LongAdder requests = new LongAdder();
    final LongAdder bytesRead = new LongAdder();
    final LongAdder bytesWritten = new LongAdder();
    final LongAdder errors = new LongAdder();

    @Override
    public String toString() {
        return requests.sum() + " requests, " + bytesRead.sum() + " bytes read, " + bytesWritten.sum()
            + " bytes written, " + errors.sum() + " errors";
    }
}
