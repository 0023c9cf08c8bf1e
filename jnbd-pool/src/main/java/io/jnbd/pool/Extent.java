package io.jnbd.pool;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * One extent of the virtual disk once it has been written: its replica group (the page location table's entry,
 * NMS) and the gate that orders writes to it. The replica array is replaced, never changed, so readers take it
 * without a lock. Only {@link ReplicaStates} changes it (the group, lost, written): see its table of moves.
 */
final class Extent {
    final int index;
    final long start;
    final RangeGate gate = new RangeGate();
    private volatile Replica[] replicas;
    /** Every replica is gone: reads and writes fail with EIO, never zeroes or old data. */
    private volatile boolean lost;
    /** A write to it has been acknowledged: until then a placement that no server could take leaves nothing behind. */
    volatile boolean written;

    Extent(int index, long start, List<Replica> replicas) {
        this.index = index;
        this.start = start;
        this.replicas = replicas.toArray(Replica[]::new);
    }

    Replica[] replicas() {
        return replicas;
    }

    boolean lost() {
        return lost;
    }

    /** Marks it lost; true if this call did. */
    synchronized boolean markLost() {
        if (lost) return false;
        lost = true;
        return true;
    }

    synchronized void add(Replica r) {
        Replica[] next = Arrays.copyOf(replicas, replicas.length + 1);
        next[replicas.length] = r;
        replicas = next;
    }

    synchronized boolean remove(Replica r) {
        List<Replica> next = new ArrayList<>(Arrays.asList(replicas));
        if (!next.remove(r)) return false;
        replicas = next.toArray(Replica[]::new);
        return true;
    }

    /** Drops the replicas that lived on {@code link} in session {@code generation}; returns them. */
    synchronized List<Replica> dropSession(MemServerLink link, int generation) {
        List<Replica> gone = new ArrayList<>(), keep = new ArrayList<>();
        for (Replica r : replicas) (r.link == link && r.generation == generation ? gone : keep).add(r);
        if (!gone.isEmpty()) replicas = keep.toArray(Replica[]::new);
        return gone;
    }

    int readableCount() {
        int n = 0;
        for (Replica r : replicas) if (r.readable()) n++;
        return n;
    }

    /** It has all its copies, none of them still being made or stale. */
    boolean healthy(int wanted) {
        int n = 0;
        for (Replica r : replicas) {
            if (!r.live() || r.state() != Replica.State.IN_SYNC) return false;
            n++;
        }
        return n >= wanted;
    }

    boolean holds(MemServerLink link) {
        for (Replica r : replicas) if (r.link == link && r.live()) return true;
        return false;
    }

    @Override
    public String toString() {
        return "extent " + index + " " + Arrays.toString(replicas);
    }
}
