package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.io.BufferPool;
import java.io.IOException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A large direct write whose payload goes to the disk chunk by chunk as it arrives, so that the disk writes
 * the first chunks while the network still carries the last (the overlap of split reads, turned round). The
 * reply leaves when every chunk is written; the first failure, if any, is the reply.
 */
final class SplitWrite {
    private final DataPath path;
    private final InFlight flight;
    private final int chunk;
    /** Chunks submitted and not yet written, plus one held by the reader until the payload is all in. */
    private final AtomicInteger pending = new AtomicInteger(1);
    private volatile Replies.Failure failure;
    private volatile boolean receiveFailed;

    SplitWrite(DataPath path, InFlight flight, int chunk) {
        this.path = path;
        this.flight = flight;
        this.chunk = chunk;
    }

    /** On the reader: receives the payload piece by piece, each piece going to an I/O thread once it is in. */
    void receive(Intake intake, Intake.Leaser leaser) throws IOException, InterruptedException {
        Request r = flight.request;
        path.stats().splitWrite();
        try {
            intake.receivePayload(r.length(), chunk, leaser, (at, piece) -> {
                long offset = r.offset() + at;
                if (at == 0) flight.timing.diskStart = System.nanoTime();
                pending.incrementAndGet();
                try {
                    path.work().execute(() -> writeChunk(offset, piece));
                } catch (RuntimeException e) { // the pool is shutting down
                    piece.release();
                    fail(new Replies.Failure(Nbd.ESHUTDOWN, "server is shutting down"));
                    chunkDone();
                }
            });
        } catch (IOException | InterruptedException | RuntimeException e) {
            receiveFailed = true;
            throw e;
        } finally {
            chunkDone();
        }
    }

    private void writeChunk(long offset, BufferPool.Lease piece) {
        try {
            if (failure == null) path.backend().write(offset, piece.buffer(), flight.request.has(Nbd.CMD_FLAG_FUA));
        } catch (Throwable t) {
            if (t instanceof InterruptedException) Thread.currentThread().interrupt();
            fail(path.replies().failure(flight.request, t));
        } finally {
            piece.release();
            chunkDone();
        }
    }

    private synchronized void fail(Replies.Failure f) {
        if (failure == null) failure = f;
    }

    private void chunkDone() {
        if (pending.decrementAndGet() != 0) return;
        flight.timing.diskEnd = System.nanoTime();
        flight.releasePayload();
        if (receiveFailed) {
            path.sink().completed(flight); // the connection is going: no reply
        } else if (failure != null) {
            path.sink().emit(path.replies().error(flight, failure));
        } else {
            path.stats().written(flight.request.length());
            path.sink().emit(path.replies().ok(flight));
        }
    }
}
