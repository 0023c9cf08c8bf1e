package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.io.BufferPool;
import java.io.IOException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A write whose payload goes to the backend piece by piece as it arrives, so that the disk writes the first
 * pieces while the network still carries the last (the overlap of split reads, turned round). The same
 * machinery streams a write larger than any buffer: at most {@code held} pieces hold a buffer at once, and the
 * reader waits for a piece to be written before it takes the next from the socket, so a slow disk slows the
 * client instead of filling the server's memory. Pieces lie on boundaries of the piece size counted from offset 0
 * of the export (the first may be shorter), so that on a direct export no two pieces share a disk block. The
 * reply leaves when every piece is written; the first failure, if any, is the reply.
 */
final class SplitWrite {
    private final DataPath path;
    private final InFlight flight;
    private final int chunk;
    /** Pieces that may hold a buffer at once. */
    private final Semaphore held;
    /** Chunks submitted and not yet written, plus one held by the reader until the payload is all in. */
    private final AtomicInteger pending = new AtomicInteger(1);
    private volatile Replies.Failure failure;
    private volatile boolean receiveFailed;

    SplitWrite(DataPath path, InFlight flight, int chunk, int held) {
        this.path = path;
        this.flight = flight;
        this.chunk = chunk;
        this.held = new Semaphore(held);
    }

    /** On the reader: receives the payload piece by piece, each piece going to an I/O thread once it is in. */
    void receive(Intake intake, Intake.Leaser leaser) throws IOException, InterruptedException {
        Request r = flight.request;
        path.stats().splitWrite();
        Intake.Leaser bounded = size -> {
            held.acquire();
            try {
                return leaser.lease(size);
            } catch (InterruptedException | RuntimeException e) {
                held.release();
                throw e;
            }
        };
        int head = (int) Math.min(r.length(), (chunk - r.offset() % chunk) % chunk);
        try {
            if (head > 0) intake.receivePayload(head, head, bounded, (at, piece) -> submit(r.offset() + at, piece));
            if (r.length() > head) intake.receivePayload(r.length() - head, chunk, bounded, (at, piece) -> submit(r.offset() + head + at, piece));
        } catch (IOException | InterruptedException | RuntimeException e) {
            receiveFailed = true;
            throw e;
        } finally {
            chunkDone();
        }
    }

    private void submit(long offset, BufferPool.Lease piece) {
        if (offset == flight.request.offset()) flight.timing.diskStart = System.nanoTime();
        pending.incrementAndGet();
        try {
            path.work().execute(() -> writeChunk(offset, piece));
        } catch (RuntimeException e) { // the pool is shutting down
            piece.release();
            held.release();
            fail(new Replies.Failure(Nbd.ESHUTDOWN, "server is shutting down"));
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
            held.release();
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
