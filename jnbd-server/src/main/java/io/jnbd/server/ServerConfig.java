package io.jnbd.server;

import java.time.Duration;

/**
 * Tunables of a server; every field has a default that suits a small machine.
 *
 * @param handshakeTimeout  a client that has not reached transmission by then is disconnected
 * @param maxConnections    clients beyond this are refused: told so in the handshake (NBD_REP_ERR_POLICY), then closed
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
 * @param sendBuffer        SO_SNDBUF of TCP connections: bytes, {@link #SEND_BUFFER_AUTO} or {@link #SEND_BUFFER_KERNEL}
 * @param receiveTimeout    a connection that has sent part of a request (a header, a write payload) and then
 *                          nothing more for this long is dropped, giving back what it holds; a client idle
 *                          between requests is never dropped
 * @param backlog           the listen backlog; 0 takes the system's limit ({@code net.core.somaxconn})
 * @param operatorSlots     connections allowed beyond maxConnections to clients on this host (loopback, Unix
 *                          socket), so that an operator can still look at a full server
 */
public record ServerConfig(Duration handshakeTimeout, int maxConnections, int requestsInFlight,
                           long bufferBudget, int maxPayload, long writeDiscardLimit, int ioThreads,
                           Duration sendTimeout, Duration busyPoll, int sendBuffer, Duration receiveTimeout,
                           int backlog, int operatorSlots) {

    /** {@code sendBuffer}: the kernel sizes every connection's send buffer (its autotuning). */
    public static final int SEND_BUFFER_KERNEL = 0;
    /** {@code sendBuffer}: {@link #LOCAL_SEND_BUFFER} for TCP clients on this host, the kernel's autotuning for others. */
    public static final int SEND_BUFFER_AUTO = -1;
    /**
     * The send buffer (SO_SNDBUF, which the kernel doubles) of a TCP client on this host. Over loopback the
     * receiver's TCP work runs in the sender's system calls, and the round trip is microseconds: a send
     * buffer this small still keeps the pipe full, and a sender that blocks on it more often leaves more of
     * that work (acknowledgements, freeing sent pages) to the client. bench/ab, 1M reads at QD8 on 22 Nov:
     * 256K took 0.14-0.18 s of server CPU per GB against 0.16-0.24 with autotuning, at 1.13x the throughput;
     * 128K starved the pipe (0.56x) and 512K sat in between.
     */
    public static final int LOCAL_SEND_BUFFER = 256 << 10;

    public ServerConfig {
        if (sendBuffer < SEND_BUFFER_AUTO) throw new IllegalArgumentException("send buffer must be a size, auto or kernel");
        if (receiveTimeout.isNegative() || receiveTimeout.isZero()) throw new IllegalArgumentException("receive timeout must be positive");
        if (backlog < 0) throw new IllegalArgumentException("backlog must be 0 (the system's limit) or positive");
        if (maxConnections < 1) throw new IllegalArgumentException("max connections must be at least 1");
        if (operatorSlots < 0) throw new IllegalArgumentException("operator slots must be 0 or more");
    }

    /**
     * The most a TLS connection's socket holds unsent (TCP_NOTSENT_LOWAT). The client decrypts every byte and
     * is the slower side, so its receive window is often full; whatever the server queued beyond it then goes
     * out from the client's own acknowledgements, in its system calls, on the core it needs for decrypting
     * (perf of fio: tcp_write_xmit of the server's socket under fio's recvfrom). Capped, the server's writer
     * waits instead and sends from its own thread. fio 1M reads at QD8 from jnbd-tls, 27 Nov, 3 rounds: with
     * no cap fio spent 0.35 s of system time per GB and jnbd-tls ran at 1.0x nbdkit-tls; capped at 16K, 32K,
     * 64K and 128K: 1076-1514, 1144-1432, 1369-1545 and 1111-1427 MB/s against nbdkit-tls's 1170-1218, fio
     * at 0.22-0.24 s/GB of system time with 64K.
     */
    public static final int TLS_UNSENT_LIMIT = 64 << 10;

    /**
     * The SO_SNDBUF to set on a TCP connection once its transmission phase starts, or 0 to leave it to the
     * kernel. {@code peerOnThisHost} is asked only in {@link #SEND_BUFFER_AUTO} mode, as it may look through
     * the host's interfaces. Under TLS, auto leaves the size to the kernel: {@link #TLS_UNSENT_LIMIT} bounds
     * the queue instead, and the kernel grows the buffer to what the client takes.
     */
    public int sendBufferFor(boolean encrypted, java.util.function.BooleanSupplier peerOnThisHost) {
        if (sendBuffer == SEND_BUFFER_AUTO) return !encrypted && peerOnThisHost.getAsBoolean() ? LOCAL_SEND_BUFFER : 0;
        return sendBuffer;
    }

    /**
     * Long enough to ride out TCP's retransmissions over a lossy link (the retransmission timer doubles from
     * 200 ms; six losses in a row cost about 25 s), short enough that a client that stopped in the middle of a
     * request gives back what it holds within half a minute.
     */
    public static final Duration DEFAULT_RECEIVE_TIMEOUT = Duration.ofSeconds(30);

    public static ServerConfig defaults() {
        return new ServerConfig(Duration.ofSeconds(10), DEFAULT_MAX_CONNECTIONS, 64, 256L << 20, 1 << 25, 256L << 20, 32, Duration.ofSeconds(60), Duration.ofNanos(50_000),
            SEND_BUFFER_AUTO, DEFAULT_RECEIVE_TIMEOUT, 0, DEFAULT_OPERATOR_SLOTS);
    }

    /** Room for a diskless site's thousands of clients; an idle connection costs a few KiB (see bench/conns). */
    public static final int DEFAULT_MAX_CONNECTIONS = 16384;
    public static final int DEFAULT_OPERATOR_SLOTS = 4;

    public ServerConfig withOperatorSlots(int n) {
        return change(c -> c.operatorSlots = n);
    }

    public ServerConfig withHandshakeTimeout(Duration d) {
        return change(c -> c.handshakeTimeout = d);
    }

    public ServerConfig withMaxConnections(int n) {
        return change(c -> c.maxConnections = n);
    }

    public ServerConfig withRequestsInFlight(int n) {
        return change(c -> c.requestsInFlight = n);
    }

    public ServerConfig withIoThreads(int n) {
        return change(c -> c.ioThreads = n);
    }

    public ServerConfig withSendTimeout(Duration d) {
        return change(c -> c.sendTimeout = d);
    }

    public ServerConfig withReceiveTimeout(Duration d) {
        return change(c -> c.receiveTimeout = d);
    }

    /** 0 for the system's limit. */
    public ServerConfig withBacklog(int n) {
        return change(c -> c.backlog = n);
    }

    public ServerConfig withBusyPoll(Duration d) {
        return change(c -> c.busyPoll = d);
    }

    /** A size in bytes, {@link #SEND_BUFFER_AUTO} or {@link #SEND_BUFFER_KERNEL}. */
    public ServerConfig withSendBuffer(int bytes) {
        return change(c -> c.sendBuffer = bytes);
    }

    public ServerConfig withBufferBudget(long bytes) {
        return change(c -> c.bufferBudget = bytes);
    }

    /** A copy with one change: each with-method names only its own field, and a new field touches only Copy. */
    private ServerConfig change(java.util.function.Consumer<Copy> edit) {
        Copy c = new Copy(this);
        edit.accept(c);
        return c.build();
    }

    private static final class Copy {
        Duration handshakeTimeout, sendTimeout, busyPoll, receiveTimeout;
        int maxConnections, requestsInFlight, maxPayload, ioThreads, sendBuffer, backlog, operatorSlots;
        long bufferBudget, writeDiscardLimit;

        Copy(ServerConfig c) {
            handshakeTimeout = c.handshakeTimeout;
            maxConnections = c.maxConnections;
            requestsInFlight = c.requestsInFlight;
            bufferBudget = c.bufferBudget;
            maxPayload = c.maxPayload;
            writeDiscardLimit = c.writeDiscardLimit;
            ioThreads = c.ioThreads;
            sendTimeout = c.sendTimeout;
            busyPoll = c.busyPoll;
            sendBuffer = c.sendBuffer;
            receiveTimeout = c.receiveTimeout;
            backlog = c.backlog;
            operatorSlots = c.operatorSlots;
        }

        ServerConfig build() {
            return new ServerConfig(handshakeTimeout, maxConnections, requestsInFlight, bufferBudget, maxPayload,
                writeDiscardLimit, ioThreads, sendTimeout, busyPoll, sendBuffer, receiveTimeout, backlog, operatorSlots);
        }
    }
}
