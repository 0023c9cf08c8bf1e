package io.jnbd.pool;

import io.jnbd.client.NbdErrorException;
import io.jnbd.client.ReadCache;
import io.jnbd.protocol.Nbd;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The page location table (NMS: an extent's replica group per entry) and every move of an extent and of its
 * replicas, so that one page says what state a copy can be in and who puts it there. Several threads move the
 * same replica (the request that completes, the repair, the link that saw its server go): recovery's moves are
 * compare-and-set, so that one decided on a state that has changed meanwhile fails instead of overwriting it,
 * and a demote wins over any state, so that a copy that missed a write is never read.
 *
 * <table>
 * <caption>Replica moves</caption>
 * <tr><th>from</th><th>to</th><th>move</th><th>made by, on which thread</th></tr>
 * <tr><td>(new)</td><td>IN_SYNC</td><td>{@link #placeForWrite}</td><td>an extent's first write, on the
 *     writer's thread, under the placing lock, before the group is in the table</td></tr>
 * <tr><td>(new)</td><td>STALE</td><td>{@link #newCopy}</td><td>recovery, for a copy not yet in the group;
 *     the repair's virtual thread</td></tr>
 * <tr><td>STALE</td><td>SYNCING</td><td>{@link #startSync}</td><td>recovery, once the copy's range on its
 *     server is cleared: from then on writes go to it; the repair's thread</td></tr>
 * <tr><td>SYNCING</td><td>IN_SYNC</td><td>{@link #finishSync}</td><td>recovery, after the last chunk; fails
 *     if a demote came first, and the copy is then discarded unread; the repair's thread</td></tr>
 * <tr><td>IN_SYNC, SYNCING</td><td>STALE</td><td>{@link #demote}</td><td>a write, trim or read its server
 *     refused with an error (ReplicatedIo, {@link #failed}, recovery reading from it); whichever thread
 *     completes the request: a client's reader thread or the repair's</td></tr>
 * <tr><td>any</td><td>dropped</td><td>{@link #serverLost}, {@link #dropDead}</td><td>its server's session
 *     ended (MemServerLink.fail, by whoever saw a request time out or the connection go): the copy went with
 *     it, there is nothing to trim</td></tr>
 * <tr><td>any</td><td>discarded</td><td>{@link #discard}, {@link #retire}</td><td>recovery, for a stale copy
 *     not needed or one it gave up on; a trim of the whole extent or an abandoned placement, holding the
 *     extent's whole range: the copy is trimmed on its server</td></tr>
 * </table>
 *
 * <p>STALE is left only by recovery resyncing the copy in place. An extent itself is unplaced (reads as
 * zeroes), then placed, then written once a write to it is acknowledged ({@link #written}); it goes back to
 * unplaced when {@link #retire retired}, and it is lost ({@link #lose}, for good: reads and writes fail with
 * EIO, never zeroes or old data) when no readable replica is left.
 */
final class ReplicaStates {
    private static final Logger log = LoggerFactory.getLogger(ReplicaStates.class);

    private final PoolConfig config;
    private final AtomicReferenceArray<Extent> extents;
    /** Striped locks, so that two first writes to one extent place it once. */
    private final Object[] placing = new Object[64];
    private final Placement placement;
    private final Recovery recovery;
    /**
     * The read path's cache, null without one. Set once while the volume is built, before any link or request
     * runs (the read path's cache reads through it, so it is made after this).
     */
    private ReadCache cache;

    ReplicaStates(PoolConfig config, Placement placement, Recovery recovery) {
        this.config = config;
        this.extents = new AtomicReferenceArray<>(config.extentCount());
        for (int i = 0; i < placing.length; i++) placing[i] = new Object();
        this.placement = placement;
        this.recovery = recovery;
    }

    void forgetLostExtentsIn(ReadCache cache) {
        this.cache = cache;
    }

    Extent extent(int index) {
        return extents.get(index);
    }

    int extentCount() {
        return extents.length();
    }

    long extentLength(Extent e) {
        return Math.min(config.extentSize(), config.size() - e.start);
    }

    // ---- placed, written ----

    /** The extent a write goes to, placed now on the servers Placement picks if no write has placed it yet. */
    Extent placeForWrite(int idx) throws PoolException {
        Extent e = extents.get(idx);
        if (e != null) return e;
        synchronized (placing[idx % placing.length]) {
            e = extents.get(idx);
            if (e != null) return e;
            List<Replica> group = new ArrayList<>();
            Set<MemServerLink> chosen = new HashSet<>();
            for (int i = 0; i < config.replicas(); i++) {
                MemServerLink l = placement.pick(chosen);
                if (l == null) break;
                MemServerLink.Session s = l.session();
                if (s == null) continue;
                chosen.add(l);
                group.add(new Replica(l, s.generation(), Replica.State.IN_SYNC));
            }
            if (group.isEmpty()) throw new PoolException(Nbd.EIO, "no memory server is up");
            e = new Extent(idx, (long) idx * config.extentSize(), group);
            for (Replica r : group) r.link.extentsHeld.add(idx);
            extents.set(idx, e);
            if (group.size() < config.replicas()) recovery.enqueue(idx); // fewer servers up than copies wanted
            return e;
        }
    }

    /** A write to it was acknowledged: from now on it is never abandoned, only retired by a trim. */
    void written(Extent e) {
        e.written = true;
    }

    // ---- stale, failed, dropped ----

    /** Never read again until recovery copies it anew. Must not be lost to a race: see the table above. */
    void demote(Extent e, Replica r) {
        if (r.demote()) {
            log.warn("pool: {} on {} is stale (a request to it failed); it will be copied anew", e, r.link.name());
        }
        recovery.enqueue(e.index);
    }

    /** A replica that failed a request: its server lost, or (an error from the server) this replica stale. */
    void failed(Extent e, Replica r, MemServerLink.Session s, Throwable err) {
        if (err instanceof NbdErrorException) demote(e, r);
        else r.link.fail(s, MemServerLink.rootMessage(err));
    }

    /** A link's session ended: every replica made in it is gone, and each extent that had one is restored. */
    void serverLost(MemServerLink link, int generation, String why) {
        int affected = 0;
        for (int idx : new ArrayList<>(link.extentsHeld)) {
            Extent e = extents.get(idx);
            if (e == null || e.dropSession(link, generation).isEmpty()) continue;
            affected++;
            if (e.readableCount() == 0) lose(e, "its last replica was on " + link.name() + " (" + why + ")");
            else recovery.enqueue(idx);
        }
        if (affected > 0) log.warn("pool: {} extents lost a replica on {}; restoring their copies", affected, link.name());
    }

    /** Drops the replicas not in sync whose session ended; a dead in-sync one is left for {@link #serverLost}. */
    void dropDead(Extent e) {
        for (Replica r : e.replicas()) {
            if (r.state() != Replica.State.IN_SYNC && !r.live()) e.remove(r);
        }
    }

    // ---- recovery's copies ----

    /** A copy recovery is about to make on {@code link}; stale until it is cleared and joins the group. */
    Replica newCopy(MemServerLink link, MemServerLink.Session s) {
        return new Replica(link, s.generation(), Replica.State.STALE);
    }

    /** A new copy enters the group, still stale: it is then cleared of whatever an older copy left there. */
    void join(Extent e, Replica r) {
        e.add(r);
        r.link.extentsHeld.add(e.index);
    }

    /** From now on writes go to it; false if a write demoted it meanwhile. */
    boolean startSync(Replica r) {
        return r.transition(Replica.State.STALE, Replica.State.SYNCING);
    }

    /** It may be read from now on; false if a write it refused after the last chunk demoted it. */
    boolean finishSync(Replica r) {
        return r.transition(Replica.State.SYNCING, Replica.State.IN_SYNC);
    }

    /** The source a copy read from failed: as {@link #failed}, with the copier's wrapping taken off. */
    void failedAsSource(Extent e, Replica r, MemServerLink.Session s, Exception ex) {
        Throwable cause = ex instanceof java.util.concurrent.ExecutionException && ex.getCause() != null ? ex.getCause() : ex;
        failed(e, r, s, PoolVolume.unwrap(cause));
    }

    /**
     * The copy being made failed a request: a full server takes no more placements for now, a lost one ends its
     * session. The copy itself is not demoted here: recovery gives up on it and discards it.
     */
    void failedAsTarget(Replica target, MemServerLink.Session ts, Exception ex) {
        Throwable cause = PoolVolume.unwrap(ex instanceof java.util.concurrent.ExecutionException ? ex.getCause() : ex);
        if (cause instanceof NbdErrorException ne) {
            if (ne.error() == Nbd.ENOSPC) target.link.markFull();
        } else {
            target.link.fail(ts, "while copying an extent to it: " + MemServerLink.rootMessage(cause));
        }
    }

    // ---- discarded, retired ----

    /** Takes a copy out of its group and frees it on its server. */
    void discard(Extent e, Replica r) {
        e.remove(r);
        discardCopy(e, r);
    }

    /**
     * A new extent that no write has reached (its first ones found no room): it leaves nothing behind and is not
     * placed, so that the next write may find room elsewhere. Waits for the whole range, so no write to it is in
     * flight.
     */
    CompletableFuture<Void> abandonIfUnwritten(Extent e) {
        if (e.written || extents.get(e.index) != e) return CompletableFuture.completedFuture(null);
        return e.gate.acquire(0, extentLength(e)).thenAccept(t -> {
            try {
                if (!e.written) retire(e);
            } finally {
                e.gate.release(t);
            }
        });
    }

    /**
     * Takes an extent out of the table; the caller holds its whole range. Its copies' discards are recorded with
     * their servers before the slot is freed, so that the writes of the next placement there wait for them.
     */
    void retire(Extent e) {
        if (extents.get(e.index) != e) return;
        for (Replica r : e.replicas()) discardCopy(e, r);
        extents.compareAndSet(e.index, e, null);
    }

    /** Trims a copy that is no longer (or never was) a replica, so it does not hold its server's memory. */
    private void discardCopy(Extent e, Replica r) {
        MemServerLink.Session s = r.link.session();
        if (s == null || s.generation() != r.generation) return; // gone with its session, or trimmed on reconnect
        CompletableFuture<Void> trim = r.link.call(() -> s.data().trim(e.start, extentLength(e), false));
        r.link.discarding(e.index, trim);
        // The extent stays in the link's extentsHeld: a new copy placed there while this check ran would
        // otherwise be forgotten, and survive as an orphan that a later placement could read from.
        trim.whenComplete((v, x) -> {
            if (x == null) {
                r.link.credit(extentLength(e));
            } else if (PoolVolume.unwrap(x) instanceof NbdErrorException refused) {
                // The server answered and kept the copy: an orphan that a later placement of this extent there
                // would read from. Only a new session clears it (the reconnect trims every extent held there),
                // so this one ends, as a lost connection's would.
                r.link.fail(s, "refused to discard extent " + e.index + ": " + refused.getMessage());
            }
        });
    }

    // ---- lost ----

    /** No replica of it is left to read: for good, so that nothing ever reads zeroes or old data in its place. */
    void lose(Extent e, String why) {
        if (!e.markLost()) return;
        if (cache != null) cache.invalidate(e.start, extentLength(e));
        log.error("pool: extent {} (bytes {} to {}) is lost: {}; its reads and writes fail with EIO", e.index, e.start,
            e.start + extentLength(e) - 1, why);
    }

    PoolException lostError(Extent e) {
        return new PoolException(Nbd.EIO, "extent " + e.index + " (bytes " + e.start + " to "
            + (e.start + extentLength(e) - 1) + ") has no replica left");
    }
}
