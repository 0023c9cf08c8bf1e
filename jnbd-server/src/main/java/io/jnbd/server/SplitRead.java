package io.jnbd.server;

import io.jnbd.protocol.Request;
import io.jnbd.server.io.BufferPool;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A large read split into chunks read in parallel, each sent as its own OFFSET_DATA chunk as soon as the disk
 * delivers it, in whatever order that is: the network starts before the disk has finished the request
 * (gmblock's synchronized multi-stream sends). At most {@code streams} chunks are read at once.
 */
final class SplitRead {
    private final DataPath path;
    private final InFlight flight;
    private final Request request;
    private final ReadPlan plan;
    private final AtomicInteger next = new AtomicInteger();
    private int unsent;

    SplitRead(DataPath path, InFlight flight, ReadPlan plan) {
        this.path = path;
        this.flight = flight;
        this.request = flight.request;
        this.plan = plan;
        this.unsent = plan.chunks();
    }

    void start() {
        path.stats().splitRead(plan.chunks());
        for (int i = 0; i < Math.min(plan.streams(), plan.chunks()); i++) submitNext();
    }

    private void submitNext() {
        int index = next.getAndIncrement();
        if (index < plan.chunks()) path.work().execute(() -> readChunk(index));
    }

    private void readChunk(int index) {
        long offset = request.offset() + (long) index * plan.chunkSize();
        int length = (int) Math.min(plan.chunkSize(), request.offset() + request.length() - offset);
        BufferPool.Lease lease = null;
        Replies.Failure failure = null;
        try {
            lease = path.buffers().acquire(length);
            if (index == 0) flight.timing.diskStart = System.nanoTime();
            path.backend().read(offset, lease.buffer());
            lease.buffer().flip();
        } catch (Throwable t) {
            if (lease != null) lease.release();
            lease = null;
            failure = path.replies().failure(request, t);
        }
        submitNext();
        // Ordering the sends under one lock lets the last chunk to arrive carry the DONE flag.
        synchronized (this) {
            boolean last = --unsent == 0;
            InFlight completes = last ? flight : null;
            if (last) flight.timing.diskEnd = System.nanoTime();
            if (lease != null) {
                path.stats().read(length);
                path.sink().emit(path.replies().data(request, offset, lease.buffer(), lease, completes));
            } else {
                path.sink().emit(path.replies().errorAt(request, failure, offset, completes));
            }
        }
    }
}
