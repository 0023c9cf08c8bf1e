package io.jnbd.server;

import io.jnbd.protocol.Request;
import io.jnbd.server.io.BufferPool;
import io.jnbd.server.io.Releasable;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.RejectedExecutionException;

/**
 * A read cut into pieces (see {@link ReadPlan}) that are read in parallel and sent as the backend delivers them,
 * so that the network starts before the disk has finished the request (gmblock's synchronized multi-stream sends).
 * The same machinery streams a read larger than any buffer: a piece is read only while fewer than
 * {@code plan.held()} hold a buffer, and a piece gives its buffer back once it is on the wire, so a client that
 * reads slowly holds the backend back instead of filling the server's memory.
 *
 * <p>A failed piece stops the read: no more pieces are started. Split into chunks, the failure is an error chunk
 * naming its offset, and once the pieces still being read are in, a final chunk ends the reply. In one ordered
 * reply, a failure before the header left is the reply; after it, the reply can no longer carry an error, and
 * the connection is closed (the client sees the read fail rather than take wrong data).
 */
final class SplitRead {
    private static final java.nio.ByteBuffer NO_HEADER = java.nio.ByteBuffer.allocate(0).asReadOnlyBuffer();

    private final DataPath path;
    private final InFlight flight;
    private final Request request;
    private final ReadPlan plan;
    private final int pieces;
    /** Ordered plans: pieces read and waiting for the ones before them; null otherwise. Guarded by this. */
    private final BufferPool.Lease[] waiting;
    // Guarded by this.
    private int next;
    private int reading;
    private int holding;
    /** Pieces handed to the sink; in an ordered plan also the index of the next piece due on the wire. */
    private int emitted;
    private Replies.Failure failure;
    private boolean ended;

    SplitRead(DataPath path, InFlight flight, ReadPlan plan) {
        this.path = path;
        this.flight = flight;
        this.request = flight.request;
        this.plan = plan;
        this.pieces = plan.pieces();
        this.waiting = plan.ordered() ? new BufferPool.Lease[pieces] : null;
    }

    void start() {
        path.stats().splitRead(pieces);
        flight.timing.diskStart = System.nanoTime();
        pump();
    }

    /** Starts as many pieces as the plan allows now; called again whenever a piece is read or leaves the server. */
    private void pump() {
        List<Integer> starting = new ArrayList<>(2);
        if (!path.sink().open()) {
            // The client is gone: a long read stops here instead of reading the rest for nobody.
            synchronized (this) {
                if (failure == null && next < pieces) {
                    failure = new Replies.Failure(io.jnbd.protocol.Nbd.ESHUTDOWN, "the connection is closed");
                    if (reading == 0) endAfterFailure();
                }
            }
            return;
        }
        synchronized (this) {
            while (failure == null && next < pieces && reading < plan.streams() && holding < plan.held()) {
                reading++;
                holding++;
                starting.add(next++);
            }
        }
        for (int piece : starting) {
            try {
                path.work().execute(() -> read(piece));
            } catch (RejectedExecutionException e) { // the pool is shutting down
                done(piece, null, new Replies.Failure(io.jnbd.protocol.Nbd.ESHUTDOWN, "server is shutting down"));
            }
        }
    }

    private void read(int piece) {
        BufferPool.Lease lease = null;
        Replies.Failure failed = null;
        try {
            lease = path.buffers().acquire(plan.length(piece));
            path.backend().read(plan.start(piece), lease.buffer().duplicate());
        } catch (Throwable t) {
            if (t instanceof InterruptedException) Thread.currentThread().interrupt();
            if (lease != null) lease.release();
            lease = null;
            failed = path.replies().failure(request, t);
        }
        done(piece, lease, failed);
        pump();
    }

    // Parts are emitted under this object's lock so that they reach the writer in the order decided here.
    private synchronized void done(int piece, BufferPool.Lease lease, Replies.Failure failed) {
        reading--;
        if (failed != null) {
            holding--;
            boolean first = failure == null;
            if (first) failure = failed;
            if (!plan.ordered() && first) path.sink().emit(path.replies().errorAt(request, failed, plan.start(piece), null));
        } else if (failure != null) {
            lease.release(); // the read has failed: nothing more goes out
            holding--;
        } else if (plan.ordered()) {
            waiting[piece] = lease;
            while (emitted < pieces && waiting[emitted] != null) {
                BufferPool.Lease ready = waiting[emitted];
                waiting[emitted] = null;
                send(emitted, ready);
            }
        } else {
            send(piece, lease);
        }
        if (failure != null && reading == 0) endAfterFailure();
    }

    private void send(int piece, BufferPool.Lease lease) {
        emitted++;
        InFlight completes = emitted == pieces ? flight : null;
        if (completes != null) flight.timing.diskEnd = System.nanoTime();
        path.stats().read(plan.length(piece));
        Releasable onWire = new Releasable() {
            private boolean released;

            @Override
            public void release() {
                if (released) return;
                released = true;
                lease.release();
                synchronized (SplitRead.this) {
                    holding--;
                }
                pump();
            }
        };
        var data = lease.buffer();
        if (!plan.ordered()) {
            path.sink().emit(path.replies().data(request, plan.start(piece), data, onWire, completes));
        } else if (piece == 0) {
            path.sink().emit(path.replies().orderedHead(request, data, onWire, completes));
        } else {
            path.sink().emit(ReplyWriter.Part.withData(NO_HEADER, data, onWire, completes));
        }
    }

    /** Every piece still being read is in: end the reply the failure left open. */
    private void endAfterFailure() {
        if (ended) return;
        ended = true;
        flight.timing.diskEnd = System.nanoTime();
        if (!plan.ordered()) {
            path.sink().emit(path.replies().ok(flight)); // the chunk that says DONE
            return;
        }
        for (int i = 0; i < pieces; i++) {
            if (waiting[i] != null) {
                waiting[i].release();
                waiting[i] = null;
                holding--;
            }
        }
        if (emitted == 0) {
            path.sink().emit(path.replies().error(flight, failure));
        } else {
            path.sink().abort("a read failed after its reply had begun (" + failure.message() + ")");
            path.sink().completed(flight);
        }
    }
}
