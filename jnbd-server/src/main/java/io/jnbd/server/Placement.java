package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import java.util.List;
import java.util.concurrent.Semaphore;

/**
 * Where the operations of a batch run: the one policy for it. The connection's reader parsed the batch and would
 * otherwise only wait for its replies, so work that costs less than a hand-off runs on it; disk work that waits runs
 * on the workers (the I/O pool, or virtual threads for a remote backend, see DataPath.work), so that the reader goes
 * on reading and a slow disk holds up no other connection.
 */
final class Placement {
    enum Where {
        /** Here, now: it never waits (memory), or it only starts here and completes elsewhere (an async backend). */
        READER,
        /** Here if one of {@link #INLINE_DISK}'s slots is free, else on the workers: disk work worth no hand-off. */
        READER_IF_FREE,
        /** On the workers. */
        WORKERS
    }

    /**
     * Cached writes without FUA up to this size are written on the reader thread. Above it the two wake-ups of
     * the hand-off are a small share of the work, and the reader goes on reading the connection's other
     * requests instead of waiting milliseconds for one large write.
     */
    private static final int INLINE_WRITE_MAX = 4 << 20;
    /** A lone request up to this size does its disk I/O on the reader. */
    private static final int INLINE_DISK_MAX = 64 * 1024;
    /**
     * How many readers may do blocking disk I/O on their own thread at once. A reader is a virtual thread, and
     * a native disk call holds its carrier (one per CPU) for the whole call: past this many, the work goes to
     * the I/O pool so that the carriers stay free for the other connections.
     */
    private static final Semaphore INLINE_DISK = new Semaphore(Math.max(1, Runtime.getRuntime().availableProcessors() / 2));

    private final DataPath path;

    Placement(DataPath path) {
        this.path = path;
    }

    /**
     * Where {@code op} of {@code plan} runs, with {@code inFlight} requests of the connection in flight. A
     * sequential plan (reordering would change a result) runs every operation in order on one worker instead.
     */
    Where where(BatchScheduler.Op op, BatchScheduler.Plan plan, int inFlight) {
        if (plan.sequential()) return Where.WORKERS;
        boolean data = op.type() == Nbd.CMD_READ || op.type() == Nbd.CMD_WRITE;
        return switch (path.strategy()) {
            // Nothing to wait for (RAM): hopping to a worker would cost more than the work.
            case IN_MEMORY -> Where.READER;
            // Started here, answered from its completion: no thread waits for it, and no hop to one.
            case ASYNC -> data ? Where.READER : disk(op, plan, inFlight);
            // A write into the page cache is quicker done here than handed to an I/O thread and back to the writer:
            // two wake-ups fewer per request, and one writer per connection keeps threads from spinning on the
            // file's inode lock. bench/ab, 1M writes at QD8 (22 Nov, 5 rounds): server CPU 0.33 -> 0.25 s/GB,
            // throughput +6% (median).
            case PAGE_CACHE -> pageCacheWrite(op) ? Where.READER_IF_FREE : disk(op, plan, inFlight);
            // The same for a cow overlay over a cached file, whose reads are answered from the page cache here too:
            // handed to the I/O pool, a write's reply was sent from an I/O thread under the connection's socket
            // lock, and the connection's other replies waited whenever that thread waited for a CPU (bench/boot,
            // 64 clients: slow reads came with slow writes of the same client, 80% against 21%).
            case BLOCKING -> path.writesToPageCache() && pageCacheWrite(op) ? Where.READER_IF_FREE : disk(op, plan, inFlight);
        };
    }

    /** A write without FUA of at most {@link #INLINE_WRITE_MAX}: it lands in the page cache, if the path's writes do. */
    private static boolean pageCacheWrite(BatchScheduler.Op op) {
        return op.type() == Nbd.CMD_WRITE && !op.fua() && op.length() <= INLINE_WRITE_MAX;
    }

    /**
     * Disk work goes to the workers, but for the connection's only request when it is small (a client at queue
     * depth 1): the reader would only wait for its reply, so it does the disk I/O itself and spares the wake-up of
     * an I/O thread, which on an idle VM costs as much as a small O_DIRECT read.
     */
    private static Where disk(BatchScheduler.Op op, BatchScheduler.Plan plan, int inFlight) {
        boolean alone = plan.ops().size() == 1 && inFlight == 1 && op.length() <= INLINE_DISK_MAX;
        return alone ? Where.READER_IF_FREE : Where.WORKERS;
    }

    /** Runs {@code work} on this thread if a slot of {@link #INLINE_DISK} is free; false if it must go to the workers. */
    static boolean runIfFree(List<Runnable> work) {
        if (work.isEmpty()) return true;
        if (!INLINE_DISK.tryAcquire()) return false;
        try {
            work.forEach(Runnable::run);
        } finally {
            INLINE_DISK.release();
        }
        return true;
    }
}
