package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import java.util.concurrent.atomic.AtomicInteger;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Who among the clients that connect gets one of the server's connection slots ({@link ServerConfig#maxConnections}).
 * Beyond the limit a few slots are kept for clients on this host (loopback or a Unix socket), so that an operator's
 * nbdinfo still gets through when remote clients have taken every slot. The others are told why in their handshake,
 * unless so many are being told already that telling one more would cost more than it is worth.
 */
final class Admission {
    private static final Logger log = LoggerFactory.getLogger(Admission.class);
    /** Clients over the limit being told so at once; beyond this they are closed without a word. */
    private static final int MAX_REFUSING = 256;
    /** {@link #admit}: no slot, and no room to say so either: close the socket. */
    static final Handshake.Refusal FLOOD = new Handshake.Refusal(Nbd.REP_ERR_POLICY, "flood", false);

    private final ServerConfig config;
    private final ServerStats stats;
    private final AtomicInteger admitted = new AtomicInteger();
    private final AtomicInteger refusing = new AtomicInteger();

    Admission(ServerConfig config, ServerStats stats) {
        this.config = config;
        this.stats = stats;
    }

    /**
     * Takes a slot for a new client (null), or says why there is none: a refusal to send in the handshake, or
     * {@link #FLOOD}. Whatever it returns but FLOOD is given back with {@link #release} when the client goes.
     */
    Handshake.Refusal admit(boolean local, String peer) {
        int limit = config.maxConnections();
        int n = admitted.incrementAndGet();
        if (n <= limit) return null;
        if (n <= limit + config.operatorSlots() && local) {
            log.info("{}: admitted to a slot kept for local operators ({} connections, limit {})", peer, n, limit);
            return null;
        }
        admitted.decrementAndGet();
        if (refusing.incrementAndGet() > MAX_REFUSING) {
            refusing.decrementAndGet();
            stats.refusedInFlood();
            return FLOOD;
        }
        stats.refusedAtLimit();
        if (n == limit + 1 || n % 1000 == 0) log.warn("{}: refused: already {} connections (--max-connections {})", peer, n - 1, limit);
        return new Handshake.Refusal(Nbd.REP_ERR_POLICY,
            "server has reached its limit of " + limit + " connections; try again later", false);
    }

    /** Gives back what a closed client held: a connection slot, or its place among those being refused. */
    void release(boolean wasAdmitted) {
        if (wasAdmitted) admitted.decrementAndGet();
        else refusing.decrementAndGet();
    }

    /** Connections holding a slot. */
    int admitted() {
        return admitted.get();
    }
}
