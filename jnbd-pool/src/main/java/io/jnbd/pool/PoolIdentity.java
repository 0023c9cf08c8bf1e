package io.jnbd.pool;

import io.jnbd.pool.memserver.SpaceName;
import java.io.IOException;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ThreadLocalRandom;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Who this pool client is on the memory servers (the NMS global page identifier's client and unit, plus an
 * instance that tells this run from the last), and the first connection that settles it. The client id may
 * change only in {@link #connectFirst}, before anything is placed: a replica's pages live under its space's name.
 */
final class PoolIdentity implements MemServerLink.Identity {
    private static final Logger log = LoggerFactory.getLogger(PoolIdentity.class);
    /** Redraws of a client id that another pool client already uses, before giving up. */
    private static final int REDRAWS = 8;

    private final PoolConfig config;
    /** Drawn per run, never 0: the key to the space without TLS, so it must not be guessable. */
    private final long instance;
    private volatile int client;

    PoolIdentity(PoolConfig config) {
        this.config = config;
        long drawn;
        do drawn = new SecureRandom().nextLong(); while (drawn == 0);
        this.instance = drawn;
        this.client = config.client() != 0 ? config.client() : drawRandom();
    }

    @Override
    public SpaceName space() {
        return new SpaceName(client, config.unit(), instance);
    }

    private static int drawRandom() {
        return 1 + ThreadLocalRandom.current().nextInt(0xFFFF);
    }

    /**
     * Connects every link once, in parallel; at least one must answer. A client id drawn at random that another
     * pool client already uses on a server is drawn again (a configured one is not: that is an error).
     */
    void connectFirst(List<MemServerLink> links) throws IOException {
        for (int attempt = 0; ; attempt++) {
            List<CompletableFuture<String>> tries = new ArrayList<>();
            for (MemServerLink l : links) {
                tries.add(CompletableFuture.supplyAsync(() -> {
                    try {
                        l.connectOnce();
                        return null;
                    } catch (IOException | RuntimeException e) {
                        return l.name() + ": " + e.getMessage();
                    }
                }, r -> Thread.ofVirtual().start(r)));
            }
            List<String> errors = new ArrayList<>();
            for (var t : tries) {
                String e = t.join();
                if (e != null) errors.add(e);
            }
            boolean taken = errors.stream().anyMatch(e -> e.contains("is in use by another pool client"));
            if (taken && config.client() == 0 && attempt < REDRAWS) {
                // Another pool client holds this id somewhere: start over with another, before anything is placed.
                for (MemServerLink l : links) {
                    MemServerLink.Session s = l.session();
                    if (s != null) l.fail(s, "client id " + client + " is taken elsewhere");
                }
                client = drawRandom();
                continue;
            }
            if (errors.size() == links.size()) throw new IOException("no memory server answered: " + String.join("; ", errors));
            if (taken) throw new IOException("client id " + client + " is in use: " + String.join("; ", errors));
            for (String e : errors) log.warn("pool: memory server {} (will keep trying)", e);
            log.info("pool: {} of {} memory servers up; client {}, unit {}, {} extents of {} KiB, {} replicas",
                links.size() - errors.size(), links.size(), client, config.unit(), config.extentCount(),
                config.extentSize() >> 10, config.replicas());
            return;
        }
    }
}
