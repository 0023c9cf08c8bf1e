package io.jnbd.server;

import java.time.Duration;

/**
 * Tunables of a server; every field has a default that suits a small machine.
 *
 * @param handshakeTimeout  a client that has not reached transmission by then is disconnected
 * @param maxConnections    connections beyond this are refused at accept
 * @param requestsInFlight  per-connection window of requests being served at once
 * @param bufferBudget      bytes of block-data buffers all connections together may hold
 * @param maxPayload        the largest read or write payload accepted (advertised in NBD_INFO_BLOCK_SIZE)
 * @param ioThreads         threads running backend calls (and so the most disk operations in progress at once)
 * @param writeDiscardLimit writes above maxPayload but below this are drained and refused; above it, the
 *                          connection is closed rather than read from for that long
 */
public record ServerConfig(Duration handshakeTimeout, int maxConnections, int requestsInFlight,
                           long bufferBudget, int maxPayload, long writeDiscardLimit, int ioThreads) {

    public static ServerConfig defaults() {
        return new ServerConfig(Duration.ofSeconds(10), 1024, 64, 256L << 20, 1 << 25, 256L << 20, 32);
    }

    public ServerConfig withHandshakeTimeout(Duration d) {
        return new ServerConfig(d, maxConnections, requestsInFlight, bufferBudget, maxPayload, writeDiscardLimit, ioThreads);
    }

    public ServerConfig withRequestsInFlight(int n) {
        return new ServerConfig(handshakeTimeout, maxConnections, n, bufferBudget, maxPayload, writeDiscardLimit, ioThreads);
    }

    public ServerConfig withIoThreads(int n) {
        return new ServerConfig(handshakeTimeout, maxConnections, requestsInFlight, bufferBudget, maxPayload, writeDiscardLimit, n);
    }

    public ServerConfig withBufferBudget(long bytes) {
        return new ServerConfig(handshakeTimeout, maxConnections, requestsInFlight, bytes, maxPayload, writeDiscardLimit, ioThreads);
    }
}
