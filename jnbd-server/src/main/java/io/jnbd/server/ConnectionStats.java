package io.jnbd.server;

import java.util.concurrent.atomic.LongAdder;

/**
 * Counters of one connection, logged when it ends, each also added to the server's totals: the one place
 * the request path counts traffic.
 */
final class ConnectionStats {
    private final ServerStats server;
    private final LongAdder requests = new LongAdder();
    private final LongAdder bytesRead = new LongAdder();
    private final LongAdder bytesWritten = new LongAdder();
    private final LongAdder errors = new LongAdder();

    ConnectionStats(ServerStats server) {
        this.server = server;
    }

    void request() {
        requests.increment();
    }

    void read(long bytes) {
        bytesRead.add(bytes);
        server.bytesRead.add(bytes);
    }

    void written(long bytes) {
        bytesWritten.add(bytes);
        server.bytesWritten.add(bytes);
    }

    void error() {
        errors.increment();
    }

    @Override
    public String toString() {
        return requests.sum() + " requests, " + bytesRead.sum() + " bytes read, " + bytesWritten.sum()
            + " bytes written, " + errors.sum() + " errors";
    }
}
