package io.jnbd.pool;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * An asynchronous lock on byte ranges of one extent, granted in arrival order. Overlapping writes pass through
 * it one after another, so that every replica applies them in the same order (two replicas that applied them in
 * different orders would hold different data); the recovery copier takes the chunk it copies, so that no write
 * lands on the source after the chunk was read but before it reached the new replica. Ranges that do not
 * overlap proceed at once. Nothing blocks a thread: a waiting request is a future.
 */
final class RangeGate {
    /** A range held or waited for. */
    static final class Ticket {
        final long from, to;
        final CompletableFuture<Ticket> granted = new CompletableFuture<>();

        Ticket(long from, long to) {
            this.from = from;
            this.to = to;
        }

        boolean overlaps(Ticket o) {
            return from < o.to && o.from < to;
        }
    }

    /** Held and waiting tickets in arrival order. Guarded by this. */
    private final List<Ticket> queue = new ArrayList<>();

    /** Completes with the ticket once {@code [from, to)} is free of every earlier request's range. */
    CompletableFuture<Ticket> acquire(long from, long to) {
        Ticket t = new Ticket(from, to);
        boolean now;
        synchronized (this) {
            now = queue.stream().noneMatch(t::overlaps);
            queue.add(t);
        }
        if (now) t.granted.complete(t);
        return t.granted;
    }

    void release(Ticket t) {
        List<Ticket> grant = new ArrayList<>();
        synchronized (this) {
            queue.remove(t);
            // A waiter goes when no ticket ahead of it, held or waiting, overlaps it: arrival order stays.
            for (int i = 0; i < queue.size(); i++) {
                Ticket w = queue.get(i);
                if (w.granted.isDone()) continue;
                boolean blocked = false;
                for (int j = 0; j < i && !blocked; j++) blocked = queue.get(j).overlaps(w);
                if (!blocked) grant.add(w);
            }
        }
        for (Ticket w : grant) w.granted.complete(w);
    }

    synchronized int size() {
        return queue.size();
    }
}
