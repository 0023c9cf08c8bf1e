package io.jnbd.pool;

import java.util.concurrent.atomic.AtomicReference;

/**
 * One copy of an extent: on which memory server, in which of that server's sessions (a replica outlives
 * neither a lost connection nor a restarted server), and whether it may be read.
 *
 * <p>Its state moves only in {@link ReplicaStates}, which holds the table of moves, through {@link #transition}
 * (a compare-and-set) and {@link #demote}. A lost connection or a restarted server is no state: the replica's
 * session ends ({@link #live} turns false for good) and it leaves its group.
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
