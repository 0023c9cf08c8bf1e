package io.jnbd.pool;

/**
 * One copy of an extent: on which memory server, in which of that server's sessions (a replica outlives
 * neither a lost connection nor a restarted server), and whether it may be read.
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
    volatile State state;

    Replica(MemServerLink link, int generation, State state) {
        this.link = link;
        this.generation = generation;
        this.state = state;
    }

    /** Its server is up in the same session the replica was made in. */
    boolean live() {
        MemServerLink.Session s = link.session();
        return s != null && s.generation() == generation;
    }

    boolean readable() {
        return state == State.IN_SYNC && live();
    }

    @Override
    public String toString() {
        return link.name() + "#" + generation + ":" + state;
    }
}
