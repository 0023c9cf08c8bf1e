package io.jnbd.pool;

import java.util.concurrent.atomic.AtomicReference;

/**
 * One copy of an extent: on which memory server, in which of that server's sessions (a replica outlives
 * neither a lost connection nor a restarted server), and whether it may be read.
 *
 * <p>Its state moves only through {@link #transition} (a compare-and-set) and {@link #demote}, so that a move
 * decided on a state that has changed meanwhile fails instead of overwriting it. The moves, who makes them and
 * on which thread:
 *
 * <table>
 * <caption>Replica states and moves</caption>
 * <tr><th>from</th><th>to</th><th>by</th><th>thread</th></tr>
 * <tr><td>(new)</td><td>IN_SYNC</td><td>placement of an extent's first write (PoolVolume.extentForWrite)</td>
 *     <td>the writer's, under the placing lock, before the replica is in any group</td></tr>
 * <tr><td>(new)</td><td>STALE</td><td>recovery, for a new copy, before it joins the group</td>
 *     <td>the repair's virtual thread</td></tr>
 * <tr><td>STALE</td><td>SYNCING</td><td>recovery, once the copy's range on its server is cleared: from then
 *     on writes go to it</td><td>the repair's virtual thread</td></tr>
 * <tr><td>SYNCING</td><td>IN_SYNC</td><td>recovery, after the last chunk is copied; fails if a demote came
 *     first, and the copy is then abandoned, never read</td><td>the repair's virtual thread</td></tr>
 * <tr><td>IN_SYNC, SYNCING</td><td>STALE</td><td>{@link #demote}: a write, trim or read its server refused
 *     with an error (PoolVolume.judge, PoolVolume.replicaFailed), also when recovery reads from it as a
 *     source</td><td>whichever thread completes the request's future: a client's reader thread, or the
 *     repair's virtual thread</td></tr>
 * </table>
 *
 * <p>Nothing else moves it: STALE is left only by recovery resyncing it in place. A lost connection or a
 * restarted server is no state: the replica's session ends ({@link #live} turns false for good) and the volume
 * drops it from its group. A replica that recovery gives up on is removed from the group in whatever state.
 */
final class Replica {
    enum State {
        /** Holds every acknowledged write: it may be read, and writes wait for it. */
        IN_SYNC,
        /** Being filled by the recovery copier: it gets every write, it is not read until the copy ends. */
        SYNCING,
        /** Missed a write its server refused: never read; the recovery worker resyncs or replaces it. */
        STALE
    }

    final MemServerLink link;
    final int generation;
    private final AtomicReference<State> state;

    Replica(MemServerLink link, int generation, State state) {
        this.link = link;
        this.generation = generation;
        this.state = new AtomicReference<>(state);
    }

    State state() {
        return state.get();
    }

    /** Moves {@code from} to {@code to} if it still is {@code from}; false, and no change, if it was not. */
    boolean transition(State from, State to) {
        return state.compareAndSet(from, to);
    }

    /** Makes it stale from whatever state it was in; true if this call did (it was not stale already). */
    boolean demote() {
        return state.getAndSet(State.STALE) != State.STALE;
    }

    /** Its server is up in the same session the replica was made in. */
    boolean live() {
        MemServerLink.Session s = link.session();
        return s != null && s.generation() == generation;
    }

    boolean readable() {
        return state() == State.IN_SYNC && live();
    }

    @Override
    public String toString() {
        return link.name() + "#" + generation + ":" + state();
    }
}
