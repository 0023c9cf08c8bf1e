package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Completions;
import io.jnbd.server.io.BufferPool;
import io.jnbd.server.io.Releasable;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * Turns the batches of requests one connection's reader has parsed into backend calls and replies: plans each
 * batch with the export's scheduler, answers the reads it can on the reader ({@link #answeredHere}: page cache,
 * sendfile, split reads), and runs every other operation as its {@link DataPath.Strategy} says (an asynchronous
 * backend's call started here, or the synchronous call) where {@link Placement} says. A request whose data moves in
 * pieces skips the batch ({@link #inPieces}). Replies made on the reader leave together in one gathering write at
 * the end of the batch.
 */
final class Dispatcher implements DataPath.ReplySink {
    /**
     * Cached reads up to this size are read from the page cache on the reader thread when it can (see readIfCached),
     * and only larger ones (or those not cached) go by sendfile. Measured on loopback (kernel 6.18, bench/ab,
     * 2026-11-28): a 1 MiB read at QD8 by preadv2 and one write reached 1.71× sendfile's MB/s and a 4 MiB one at QD1
     * 1.51×, at 1.5-1.7× the CPU per GB (level with nbdkit's). {@code -Djnbd.inlineReadMax=BYTES} moves the line
     * for such comparisons.
     */
    private static final int INLINE_READ_MAX = Integer.getInteger("jnbd.inlineReadMax", 4 << 20);

    private final Export export;
    private final boolean structured;
    private final List<MetaContext> metaContexts;
    private final Window window;
    private final ReplyWriter writer;
    private final Thread reader;
    /** Between the backend's beginBatch and endBatch on the reader thread; only the reader reads or writes it. */
    private boolean batchOpen;
    private final java.util.function.Consumer<String> drop;
    private DataPath path;
    private Placement placement;
    /** Replies made on the reader thread during one batch; only the reader thread touches it. */
    private final List<ReplyWriter.Part> deferred = new ArrayList<>();
    /** Where replies made together off the reader go (see Completions): one sink per connection, by identity. */
    private final java.util.function.Consumer<List<ReplyWriter.Part>> sendTogether;

    Dispatcher(Session session, Window window, ReplyWriter writer, Thread reader, java.util.function.Consumer<String> drop) {
        this.export = session.export();
        this.drop = drop;
        this.structured = session.structuredReplies();
        this.metaContexts = session.metaContexts();
        this.window = window;
        this.writer = writer;
        this.reader = reader;
        this.sendTogether = writer::sendFromWorker;
    }

    /** Set once, before the first batch (the path's sink is this dispatcher). */
    void use(DataPath path) {
        this.path = path;
        this.placement = new Placement(path);
    }

    /**
     * A reply carrying this much data in a buffer leaves as soon as it is made, with the replies collected before
     * it, rather than at the end of its batch. Its data was just written into the buffer (a read from the page
     * cache or from memory) and is still in the CPU's caches; a batch of eight 1 MiB reads sent together at the
     * end had pushed the first ones out, and the copy into the socket read them back from memory: read 1M QD8 of a
     * cached file 1.34x (bench/ab, 28 Nov, median of 3), 0.71 to 0.54 s of server CPU per GB. Small replies still
     * leave together: for them the system call per write is the cost, not the copy.
     * {@code -Djnbd.sendAtOnce=BYTES} moves the line.
     */
    static final int SEND_AT_ONCE = Integer.getInteger("jnbd.sendAtOnce", 256 * 1024);

    /**
     * Sends a reply part. On the reader thread, replies made while a batch is being submitted are collected
     * and leave together in one gathering write at its end, or with the first large one ({@link #SEND_AT_ONCE});
     * elsewhere (I/O threads) they go out at once if the socket takes them, else through the writer thread.
     */
    @Override
    public void emit(ReplyWriter.Part part) {
        if (Thread.currentThread() == reader) {
            deferred.add(part);
            if (part.data() != null && part.data().remaining() >= SEND_AT_ONCE) flush();
        } else if (!Completions.hold(sendTogether, part)) writer.sendFromWorker(part);
    }

    @Override
    public void completed(InFlight f) {
        window.completed(f);
    }

    @Override
    public void abort(String why) {
        drop.accept(why);
    }

    @Override
    public boolean open() {
        return !writer.failed();
    }

    /** Sends the replies collected on the reader. */
    void flush() {
        if (deferred.isEmpty()) return;
        // Taken out before sending: a part released by the write may make another reply here (a split read that
        // finds its connection closed ends its reply), which must not be cleared unsent.
        List<ReplyWriter.Part> out = new ArrayList<>(deferred);
        deferred.clear();
        writer.sendInline(out);
    }

    /**
     * Whether {@code f}'s data moves in pieces as it arrives or as it is read, rather than whole through a batch: a
     * request too long for any buffer (Export.streamed), or a long direct write from a client with nothing else in
     * flight (Export.writeChunkSize). With {@link Export#readPlan} for the reads of a batch, the one place where a
     * request is split.
     */
    boolean inPieces(InFlight f) {
        Request r = f.request;
        return export.streamed(r) || (r.type() == Nbd.CMD_WRITE && r.length() > 0 && splitWriteChunk(r) > 0);
    }

    /**
     * The size in which a write's payload goes to the disk as it arrives, or 0 to receive it whole. Only a client
     * with nothing else in flight gets its write split: with more requests in flight the disk already works on one
     * while the next arrives, and splitting measured level to 0.8x at QD2-8 (4 MiB direct writes, 22 Nov) against
     * 1.3-1.7x at QD1.
     */
    private int splitWriteChunk(Request r) {
        return window.inFlight() == 1 ? export.writeChunkSize(r) : 0;
    }

    /**
     * Serves a request {@link #inPieces} took, outside the scheduler's batches. A write is received piece by piece
     * on this thread, each piece written as it arrives; a streamed read is sent piece by piece as the backend
     * delivers it, or by sendfile where reads go zero-copy (the page cache streams any length).
     */
    void serveInPieces(InFlight f, Intake in, Intake.Leaser leaser) throws IOException, InterruptedException {
        Request r = f.request;
        if (r.type() == Nbd.CMD_WRITE) {
            boolean streamed = export.streamed(r);
            new SplitWrite(path, f, streamed ? Export.STREAM_PIECE : splitWriteChunk(r),
                streamed ? Export.STREAM_HELD : Integer.MAX_VALUE).receive(in, leaser);
        } else if (path.zeroCopy()) {
            sendCachedRead(f);
        } else {
            ReadPlan plan = export.readPlan(r, structured);
            if (plan.ordered()) {
                // One reply whose pieces leave as they are read, from other threads: no other reply may land
                // between them, so it has the connection to itself, from the moment the others are answered
                // until its last piece is on the wire. Only a read past the largest block size that the client
                // wants in one piece (no structured replies, or DF) takes this path.
                flush();
                window.alone(() -> new SplitRead(path, f, plan).start());
            } else {
                new SplitRead(path, f, plan).start();
            }
        }
        flush();
    }

    /** Plans a batch with the export's scheduler and starts its operations. */
    void submit(List<InFlight> batch) {
        if (batch.isEmpty()) {
            flush(); // e.g. error replies made while parsing
            return;
        }
        List<Request> requests = new ArrayList<>(batch.size());
        Map<Request, InFlight> byRequest = new IdentityHashMap<>();
        for (InFlight f : batch) {
            requests.add(f.request);
            byRequest.put(f.request, f);
        }
        batch.clear();
        BatchScheduler.Plan plan = export.scheduler().plan(requests);
        path.stats().planned(plan);
        List<Runnable> here = new ArrayList<>();
        List<Runnable> hereIfFree = new ArrayList<>();
        List<Runnable> workers = new ArrayList<>(plan.ops().size());
        for (BatchScheduler.Op op : plan.ops()) {
            List<InFlight> members = new ArrayList<>(op.members().size());
            for (Request r : op.members()) members.add(byRequest.get(r));
            // A sequential plan runs every operation in order on one worker: it takes no read's quick way.
            if (!plan.sequential() && answeredHere(op, members)) continue;
            Runnable work = path.strategy() == DataPath.Strategy.ASYNC && !plan.sequential()
                && (op.type() == Nbd.CMD_READ || op.type() == Nbd.CMD_WRITE)
                ? () -> serveAsync(op, members) : () -> serve(op, members);
            switch (placement.where(op, plan, window.inFlight())) {
                case READER -> here.add(work);
                case READER_IF_FREE -> hereIfFree.add(work);
                case WORKERS -> workers.add(work);
            }
        }
        Backend backend = path.backend();
        backend.beginBatch();
        batchOpen = true;
        boolean ranIfFree;
        try {
            here.forEach(Runnable::run);
            ranIfFree = Placement.runIfFree(hereIfFree);
        } finally {
            batchOpen = false;
            backend.endBatch();
        }
        if (!ranIfFree) workers.addAll(0, hereIfFree);
        flush();
        if (workers.isEmpty()) return;
        if (plan.sequential()) {
            path.work().execute(() -> workers.forEach(Runnable::run));
        } else {
            for (Runnable t : workers) path.work().execute(t);
        }
    }

    /**
     * The reads answered while the batch is planned, on this thread: from the page cache (sendfile, or a read that
     * the page cache holds), a read of nothing, and a read split into pieces that leave as they are read. Returns
     * false for an operation that goes the backend's way.
     */
    private boolean answeredHere(BatchScheduler.Op op, List<InFlight> members) {
        if (op.type() != Nbd.CMD_READ) return false;
        if (path.zeroCopy()) {
            // Cached reads never need the merged buffer: each member goes out by itself, zero-copy.
            for (InFlight m : members) sendCachedRead(m);
            return true;
        }
        if (members.size() != 1) return false;
        InFlight f = members.getFirst();
        Request r = f.request;
        if (r.length() == 0) {
            emit(path.replies().ok(f));
            return true;
        }
        // Under TLS (no sendfile) too: read, encrypt and send on this thread, no hand-off at all. bench/profile TLS=1
        // randread 4k QD32 spent a third of the server's CPU on the I/O pool's pread and the two wake-ups around it.
        if (r.length() <= INLINE_READ_MAX && path.cachedReads() && readIfCached(f)) return true;
        ReadPlan split = export.readPlan(r, structured);
        if (split == null) return false;
        new SplitRead(path, f, split).start();
        return true;
    }

    /** A cached read: from the page cache on this thread if it is there and at most INLINE_READ_MAX, else by sendfile. */
    private void sendCachedRead(InFlight f) {
        Request r = f.request;
        if (r.length() == 0) {
            emit(path.replies().ok(f));
            return;
        }
        if (r.length() <= INLINE_READ_MAX && path.cachedReads() && readIfCached(f)) return;
        path.stats().read(r.length());
        emit(path.replies().file(f, path.zeroCopySource()));
    }

    /**
     * Run to completion for small cached reads: when the page cache holds the data (preadv2 RWF_NOWAIT), read
     * it on this thread, so that a whole batch of small reads costs one read system call each plus one
     * gathering write. Returns false to leave the read to sendfile.
     */
    private boolean readIfCached(InFlight f) {
        Request r = f.request;
        BufferPool.Lease lease;
        try {
            lease = path.buffers().tryAcquire((int) r.length(), 0);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
        if (lease == null) return false;
        f.timing.diskStart = System.nanoTime();
        boolean hit;
        try {
            hit = path.backend().readIfCached(r.offset(), lease.buffer());
        } catch (IOException e) {
            hit = false;
        }
        if (!hit) {
            lease.release();
            return false;
        }
        f.timing.diskEnd = System.nanoTime();
        path.stats().read(r.length());
        emit(path.replies().data(r, r.offset(), lease.buffer().flip(), lease, f));
        return true;
    }

    /** Runs one disk operation and replies to every request it serves. */
    private void serve(BatchScheduler.Op op, List<InFlight> members) {
        InFlight first = members.getFirst();
        Request r = first.request;
        first.timing.diskStart = System.nanoTime();
        var backend = path.backend();
        try {
            switch (op.type()) {
                case Nbd.CMD_READ -> {
                    readAndReply(op, members);
                    return;
                }
                case Nbd.CMD_WRITE -> {
                    if (members.size() == 1) {
                        if (first.payload != null) first.payload.writeTo(backend, r.offset(), r.has(Nbd.CMD_FLAG_FUA));
                    } else {
                        List<ByteBuffer> bufs = new ArrayList<>(members.size());
                        for (InFlight m : members) m.payload.addBuffersTo(bufs);
                        backend.write(op.offset(), bufs.toArray(ByteBuffer[]::new), op.fua());
                    }
                    path.stats().written(op.length());
                }
                case Nbd.CMD_FLUSH -> backend.flush();
                case Nbd.CMD_TRIM -> {
                    if (r.length() > 0) backend.trim(r.offset(), r.length(), r.has(Nbd.CMD_FLAG_FUA));
                }
                case Nbd.CMD_WRITE_ZEROES -> {
                    if (r.length() > 0) {
                        backend.zero(r.offset(), r.length(), !r.has(Nbd.CMD_FLAG_NO_HOLE),
                            r.has(Nbd.CMD_FLAG_FAST_ZERO), r.has(Nbd.CMD_FLAG_FUA));
                    }
                }
                case Nbd.CMD_CACHE -> {
                    if (r.length() > 0) backend.cache(r.offset(), r.length());
                }
                case Nbd.CMD_BLOCK_STATUS -> {
                    var answers = BlockStatus.of(backend, metaContexts, r, path.replies());
                    markDiskDone(members);
                    emit(path.replies().blockStatus(first, answers));
                    return;
                }
                default -> throw new IllegalStateException("unvalidated command " + r);
            }
            path.stats().covered(op.type(), op.length());
            markDiskDone(members);
            for (InFlight m : members) {
                m.releasePayload();
                emit(path.replies().ok(m));
            }
        } catch (Throwable t) {
            if (t instanceof InterruptedException) Thread.currentThread().interrupt();
            Replies.Failure failure = path.replies().failure(r, t);
            markDiskDone(members);
            for (InFlight m : members) {
                m.releasePayload();
                emit(path.replies().error(m, failure));
            }
        }
    }

    /**
     * A read or write of an asynchronous backend: started on this thread, replied to from whichever thread
     * completes it (the sends of a reply made off the reader go out as workers' do).
     */
    private void serveAsync(BatchScheduler.Op op, List<InFlight> members) {
        InFlight first = members.getFirst();
        first.timing.diskStart = System.nanoTime();
        if (op.type() == Nbd.CMD_WRITE) {
            List<ByteBuffer> bufs = new ArrayList<>(members.size());
            for (InFlight m : members) {
                if (m.payload != null) m.payload.addBuffersTo(bufs);
            }
            path.backend().writeAsync(op.offset(), bufs.toArray(ByteBuffer[]::new), op.fua()).whenComplete((v, err) -> {
                markDiskDone(members);
                if (err == null) path.stats().written(op.length());
                Replies.Failure failure = err == null ? null : path.replies().failure(first.request, err);
                for (InFlight m : members) {
                    m.releasePayload();
                    emit(failure == null ? path.replies().ok(m) : path.replies().error(m, failure));
                }
            });
            return;
        }
        BufferPool.Lease lease;
        try {
            lease = path.buffers().tryAcquire((int) op.length(), 0);
            if (lease == null) {
                flush(); // replies collected here hold buffers too
                lease = acquireOutsideBatch((int) op.length());
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            for (InFlight m : members) emit(path.replies().error(m, Nbd.ESHUTDOWN, "server is shutting down"));
            return;
        }
        BufferPool.Lease held = lease;
        path.backend().readAsync(op.offset(), held.buffer().duplicate()).whenComplete((v, err) -> {
            markDiskDone(members);
            if (err != null) {
                held.release();
                Replies.Failure failure = path.replies().failure(first.request, err);
                for (InFlight m : members) emit(path.replies().error(m, failure));
                return;
            }
            path.stats().read(op.length());
            replyWithSlices(op, members, held);
        });
    }

    /**
     * Waits for a buffer. Inside the backend's batch (see Backend#beginBatch), the requests a forwarding backend
     * holds there hold buffers too, and would never free them: the batch is ended for the wait and begun again.
     */
    private BufferPool.Lease acquireOutsideBatch(int length) throws InterruptedException {
        if (!batchOpen || Thread.currentThread() != reader) return path.buffers().acquire(length);
        Backend backend = path.backend();
        backend.endBatch();
        try {
            return path.buffers().acquire(length);
        } finally {
            backend.beginBatch();
        }
    }

    /** One backend read for the whole operation; each member's reply carries its own slice of the buffer. */
    private void readAndReply(BatchScheduler.Op op, List<InFlight> members) throws IOException, InterruptedException {
        BufferPool.Lease lease = path.buffers().tryAcquire((int) op.length(), 0);
        if (lease == null) {
            // Replies this reader has collected hold buffers too: send them before waiting for more.
            if (Thread.currentThread() == reader) flush();
            lease = acquireOutsideBatch((int) op.length());
        }
        try {
            path.backend().read(op.offset(), lease.buffer());
        } catch (IOException | RuntimeException e) {
            lease.release();
            throw e;
        }
        markDiskDone(members);
        path.stats().read(op.length());
        replyWithSlices(op, members, lease);
    }

    private void replyWithSlices(BatchScheduler.Op op, List<InFlight> members, BufferPool.Lease lease) {
        Releasable[] shares = Releasable.share(lease, members.size());
        for (int i = 0; i < members.size(); i++) {
            InFlight m = members.get(i);
            Request r = m.request;
            ByteBuffer slice = lease.buffer().slice((int) (r.offset() - op.offset()), (int) r.length());
            emit(path.replies().data(r, r.offset(), slice, shares[i], m));
        }
    }

    private static void markDiskDone(List<InFlight> members) {
        long now = System.nanoTime();
        long start = members.getFirst().timing.diskStart;
        for (InFlight m : members) {
            m.timing.diskStart = start;
            m.timing.diskEnd = now;
        }
    }
}
