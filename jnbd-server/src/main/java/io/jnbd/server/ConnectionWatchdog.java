package io.jnbd.server;

import java.time.Duration;
import java.util.Collection;
import java.util.concurrent.TimeUnit;
import java.util.function.IntSupplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What the server's timer checks a few times a second: clients that keep what they hold from everyone else, and
 * memory left behind by a burst of clients that has gone.
 */
final class ConnectionWatchdog {
    private static final Logger log = LoggerFactory.getLogger(ConnectionWatchdog.class);

    private final ServerConfig config;
    private final Collection<Connection> connections;
    private final IntSupplier admitted;
    private int connectionsPeak;
    private long lastTrim;

    ConnectionWatchdog(ServerConfig config, Collection<Connection> connections, IntSupplier admitted) {
        this.config = config;
        this.connections = connections;
        this.admitted = admitted;
    }

    /** How often to {@link #check}: a quarter of the shortest timeout, between 50 ms and 1 s. */
    long periodMillis() {
        long shortest = Math.min(config.sendTimeout().toMillis(), config.receiveTimeout().toMillis());
        return Math.max(50, Math.min(1000, shortest / 4));
    }

    void check() {
        long now = System.nanoTime();
        dropStalledConnections(now);
        returnMemoryAfterBurst(now);
    }

    /**
     * Drops the clients that keep what they hold from everyone else: one that stopped reading its replies, one
     * that stopped sending in the middle of a request. Dropping gives back its buffers and its permits.
     */
    private void dropStalledConnections(long now) {
        for (Connection c : connections) {
            if (c.writerStalledNanos(now) > config.sendTimeout().toNanos()) {
                String why = "has not read its replies for " + seconds(config.sendTimeout());
                log.warn("{}: {}, closing", c.peer(), why);
                c.drop("dropped: " + why);
            } else if (c.receiveStalledNanos(now) > config.receiveTimeout().toNanos()) {
                String why = "sent part of a request, then nothing for " + seconds(config.receiveTimeout());
                log.warn("{}: {}, closing", c.peer(), why);
                c.drop("dropped: " + why);
            }
        }
    }

    /**
     * After a burst of clients has left (a diskless site's machines done booting), asks the collector to give
     * back the heap their connections took: the serial collector shrinks the heap only in a full collection, and
     * an idle server would not run one for hours, holding hundreds of MiB it no longer needs. At most once
     * every 10 s, and only when at least 500 connections and half of the peak have gone: a small live set
     * takes the collector a few milliseconds.
     */
    private void returnMemoryAfterBurst(long now) {
        int n = admitted.getAsInt();
        connectionsPeak = Math.max(connectionsPeak, n);
        if (connectionsPeak - n < 500 || n > connectionsPeak / 2 || now - lastTrim < TimeUnit.SECONDS.toNanos(10)) return;
        lastTrim = now;
        log.info("{} of {} connections have closed: returning their memory", connectionsPeak - n, connectionsPeak);
        connectionsPeak = n;
        System.gc();
    }

    private static String seconds(Duration d) {
        return d.toMillis() % 1000 == 0 ? d.toSeconds() + "s" : d.toMillis() / 1000.0 + "s";
    }
}
