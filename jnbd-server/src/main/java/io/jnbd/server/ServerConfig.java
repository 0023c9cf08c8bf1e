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
 * @param sendTimeout       a connection whose reply has not moved for this long is dropped, so that clients which
 *                          stop reading cannot keep buffers from everyone else
 * @param busyPoll          how long a connection's reader polls for the next request before it sleeps, when its
 *                          client sends one request at a time (see BusyPoll); zero never polls
 * @param writeDiscardLimit writes above maxPayload but below this are drained and refused; above it, the
 *                          connection is closed rather than read from for that long
 */
public record ServerConfig(Duration handshakeTimeout, int maxConnections, int requestsInFlight,
                           long bufferBudget, int maxPayload, long writeDiscardLimit, int ioThreads,
                           Duration sendTimeout, Duration busyPoll) {

    public static ServerConfig defaults() {
        return new ServerConfig(Duration.ofSeconds(10), 1024, 64, 256L << 20, 1 << 25, 256L << 20, 32, Duration.ofSeconds(60), Duration.ofNanos(50_000));
    }

    public ServerConfig withHandshakeTimeout(Duration d) {
        return new ServerConfig(d, maxConnections, requestsInFlight, bufferBudget, maxPayload, writeDiscardLimit, ioThreads, sendTimeout, busyPoll);
    }

    public ServerConfig withRequestsInFlight(int n) {
        return new ServerConfig(handshakeTimeout, maxConnections, n, bufferBudget, maxPayload, writeDiscardLimit, ioThreads, sendTimeout, busyPoll);
    }

    public ServerConfig withIoThreads(int n) {
        return new ServerConfig(handshakeTimeout, maxConnections, requestsInFlight, bufferBudget, maxPayload, writeDiscardLimit, n, sendTimeout, busyPoll);
    }

    public ServerConfig withSendTimeout(Duration d) {
        return new ServerConfig(handshakeTimeout, maxConnections, requestsInFlight, bufferBudget, maxPayload, writeDiscardLimit, ioThreads, d, busyPoll);
    }

    public ServerConfig withBusyPoll(Duration d) {
        return new ServerConfig(handshakeTimeout, maxConnections, requestsInFlight, bufferBudget, maxPayload, writeDiscardLimit, ioThreads, sendTimeout, d);
    }

    public ServerConfig withBufferBudget(long bytes) {
        return new ServerConfig(handshakeTimeout, maxConnections, requestsInFlight, bytes, maxPayload, writeDiscardLimit, ioThreads, sendTimeout, busyPoll);
    }
}
