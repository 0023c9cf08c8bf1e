package io.jnbd.pool;

import io.jnbd.pool.memserver.SpaceName;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * A virtual disk spread over memory servers in replicated extents (NMS), as the rest of jnbd opens and uses it.
 * The client owns the placement, so no other party needs to agree on anything; a server's liveness is its
 * connection plus a per-request timeout. The parts, each one concern:
 * <ul>
 * <li>{@link PoolIdentity}: who this client is on the servers, settled while the volume opens;
 * <li>{@link MemServerLink}: one per server, its connection and sessions;
 * <li>{@link ReplicaStates}: the page location table and every move of an extent and its replicas;
 * <li>{@link ReplicatedIo}: the requests, from a range to the servers' replies;
 * <li>{@link Placement} and {@link Recovery}: where a copy goes, and the copies restored in the background.
 * </ul>
 *
 * <p>A write goes to every live replica of its extent and completes when all of them have it; a replica whose
 * server refused it is marked stale and never read again until resynced. A read goes to one replica, the least
 * busy, and moves on to another on error or timeout. A lost server's replicas are dropped at once and
 * {@link Recovery} restores the copies elsewhere while I/O goes on. An extent with no replica left is lost:
 * EIO for its reads and writes, never zeroes or old data. See docs/decisions/0005-memory-pool.md.
 */
public final class PoolVolume implements AutoCloseable, MemServerLink.Listener {
    private final PoolConfig config;
    private final PoolIdentity identity;
    private final List<MemServerLink> links = new ArrayList<>();
    private final Placement placement;
    private final Recovery recovery;
    private final ReplicaStates states;
    private final ReplicatedIo io;

    private PoolVolume(PoolConfig config) {
        this.config = config;
        this.identity = new PoolIdentity(config);
        for (String s : config.servers()) {
            links.add(new MemServerLink(s, identity, config.serverTimeout(), config.extentSize(), this, config.tls()));
        }
        this.placement = new Placement(links, config.candidates(), config.extentSize());
        this.recovery = new Recovery(this, config.recoveryRate());
        this.states = new ReplicaStates(config, placement, recovery);
        this.io = new ReplicatedIo(config, states);
    }

    /**
     * Connects to the memory servers and returns the volume. At least one must answer; the others are connected
     * in the background as they come up.
     */
    public static PoolVolume open(PoolConfig config) throws IOException {
        PoolVolume v = new PoolVolume(config);
        v.status().toJson(); // loads the JSON library now rather than in the first status poll
        try {
            v.identity.connectFirst(v.links);
        } catch (IOException | RuntimeException e) {
            v.close();
            throw e;
        }
        for (MemServerLink l : v.links) l.start();
        v.recovery.start();
        return v;
    }

    SpaceName space() {
        return identity.space();
    }

    public long size() {
        return config.size();
    }

    PoolConfig config() {
        return config;
    }

    List<MemServerLink> links() {
        return links;
    }

    Extent extent(int index) {
        return states.extent(index);
    }

    int extentCount() {
        return states.extentCount();
    }

    ReplicaStates states() {
        return states;
    }

    Placement placement() {
        return placement;
    }

    Recovery recovery() {
        return recovery;
    }

    ReplicatedIo io() {
        return io;
    }

    // ---- requests: ReplicatedIo serves them, and says what each does ----

    public CompletableFuture<Void> read(long offset, ByteBuffer dst) {
        return io.read(offset, dst);
    }

    public CompletableFuture<Void> write(long offset, ByteBuffer src) {
        return io.write(offset, src);
    }

    public CompletableFuture<Void> trim(long offset, long length) {
        return io.trim(offset, length);
    }

    public CompletableFuture<Void> flush() {
        return io.flush();
    }

    // ---- servers up and down, status ----

    @Override
    public void up(MemServerLink link) {
        recovery.wake();
    }

    @Override
    public void down(MemServerLink link, int generation, String why) {
        states.serverLost(link, generation, why);
    }

    public PoolStatus status() {
        return PoolStatus.of(this, recovery);
    }

    @Override
    public void close() {
        recovery.close();
        for (MemServerLink l : links) l.close();
    }

    static Throwable unwrap(Throwable e) {
        while (e instanceof CompletionException && e.getCause() != null) e = e.getCause();
        return e;
    }
}
