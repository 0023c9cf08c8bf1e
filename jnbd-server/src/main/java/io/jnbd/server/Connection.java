package io.jnbd.server;

import io.jnbd.protocol.BlockStatusDescriptor;
import io.jnbd.protocol.Chunks;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.ProtocolException;
import io.jnbd.protocol.Request;
import io.jnbd.protocol.SimpleReply;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.NbdErrors;
import io.jnbd.server.io.BufferPool;
import io.jnbd.server.io.NativeIo;
import io.jnbd.server.io.Releasable;
import io.jnbd.server.net.Transport;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.FileChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One client connection: the handshake, then the transmission phase.
 *
 * <p>Three roles share the work. This thread reads and validates requests (and write payloads), draining
 * whatever the client has sent; the server's I/O threads run backend calls; the connection's
 * {@link ReplyWriter} sends replies. Each request moves received → reading (backend) → sending → done,
 * holding one permit of the connection's window from the moment it is read until its reply is on the wire.
 */
final class Connection implements Runnable {
    private static final Logger log = LoggerFactory.getLogger(Connection.class);
    /** Cached reads up to this size are served from the page cache on the reader thread when it can (see readIfCached). */
    private static final int INLINE_READ_MAX = 64 * 1024;
    /**
     * Cached writes without FUA up to this size are written on the reader thread (see submit). Above it the
     * two wake-ups of the hand-off are a small share of the work, and the reader goes on reading the
     * connection's other requests instead of waiting milliseconds for one large write.
     */
    private static final int INLINE_WRITE_MAX = 4 << 20;
    /** A lone request up to this size does its disk I/O on this thread (see submit). */
    private static final int INLINE_DISK_MAX = 64 * 1024;
    private static final int CONNECTION_BUFFER_BYTES = 64 << 20;
    /**
     * How many readers may do blocking disk I/O on their own thread at once. A reader is a virtual thread, and
     * a native disk call holds its carrier (one per CPU) for the whole call: past this many, the work goes to
     * the I/O pool so that the carriers stay free for the other connections.
     */
    private static final Semaphore INLINE_DISK = new Semaphore(Math.max(1, Runtime.getRuntime().availableProcessors() / 2));

    private final NbdServer server;
    private final Transport transport;
    private final String peer;
    /** Set for a client the server has no room for: the handshake turns every option down with it. */
    private final Handshake.Refusal refused;
    private final ConnectionStats stats = new ConnectionStats();
    private final int window;
    private final Semaphore inFlight;
    /** Per-connection bound on buffered block data, in 4 KiB units, so one client cannot take the whole budget. */
    private final Semaphore byteBudget = new Semaphore(CONNECTION_BUFFER_BYTES / 4096);
    private volatile boolean transmitting;
    private volatile boolean stopRequested;
    private volatile String dropReason;
    private Session session;
    private ReplyWriter writer;
    private volatile Intake intake;
    /** Where this connection's backend calls run: the I/O pool, or virtual threads for a remote backend. */
    private java.util.concurrent.Executor work;
    private Thread readerThread;
    /** Replies made on the reader thread during one batch; only the reader thread touches it. */
    private final List<ReplyWriter.Part> deferred = new ArrayList<>();

    Connection(NbdServer server, Transport transport, String peer, Handshake.Refusal refused) {
        this.server = server;
        this.transport = transport;
        this.peer = peer;
        this.refused = refused;
        this.window = server.config().requestsInFlight();
        this.inFlight = new Semaphore(window);
    }

    String peer() {
        return peer;
    }

    boolean inTransmission() {
        return transmitting;
    }

    /** Stops reading new requests; requests already read are still served and answered. */
    void stopReading() {
        stopRequested = true;
        if (!transmitting) {
            abort();
            return;
        }
        transport.shutdownInput();
    }

    /**
     * Ends the connection from any thread: shuts the socket down in both directions, which wakes every
     * thread blocked on it. The descriptor itself is closed only by {@link #run} once the writer thread has
     * finished, because the writer may be inside a native sendfile on it, and a closed descriptor number can
     * be reused by another client's socket.
     */
    void abort() {
        transport.shutdown();
    }

    /** Whether this connection holds one of the server's connection slots (a refused one does not). */
    boolean admitted() {
        return refused == null;
    }

    /** How long the writer has been blocked in one write, in nanoseconds; 0 when it is not writing. */
    long writerStalledNanos(long now) {
        ReplyWriter w = writer;
        return w == null ? 0 : w.busyNanos(now);
    }

    /** How long the client has left a request it began sending unfinished, in nanoseconds; 0 if it has not. */
    long receiveStalledNanos(long now) {
        Intake i = intake;
        return i == null ? 0 : i.stalledNanos(now);
    }

    /** Ends the connection (see {@link #abort()}), saying why in the line that logs its end. */
    void drop(String why) {
        dropReason = why;
        abort();
    }

    @Override
    public void run() {
        String end = "client disconnected";
        try {
            session = new Handshake(transport, server.exports(),
                () -> server.stopping() ? NbdServer.SHUTTING_DOWN : refused).run();
            if (session == null) {
                log.debug("{}: handshake ended without an export", peer);
                return;
            }
            transmitting = true;
            server.exports().attached(session.export(), peer);
            log.info("{}: connected to export '{}' ({}structured replies{}, flags {})", peer, session.export().name(),
                session.structuredReplies() ? "" : "no ", session.blockStatusAllowed() ? ", base:allocation" : "",
                String.join(",", Nbd.transmissionFlagNames(session.transmissionFlags())));
            end = transmission();
        } catch (ProtocolException e) {
            end = "closed for a protocol error: " + e.getMessage();
        } catch (EOFException | ClosedChannelException e) {
            end = stopRequested ? "closed by server shutdown" : "client disconnected";
        } catch (IOException e) {
            end = "connection error: " + e.getMessage();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            end = "interrupted";
        } catch (RuntimeException e) {
            end = "internal error: " + e;
            log.error("{}: internal error", peer, e);
        } finally {
            if (transmitting) server.exports().detached(session.export(), peer);
            if (dropReason != null) end = dropReason;
            if (intake != null) intake.release();
            transport.close();
            server.connectionClosed(this);
            if (session != null) log.info("{}: disconnected from '{}' ({}): {}", peer, session.export().name(), end, stats);
            else if (refused != null) log.debug("{}: refused ({}): {}", peer, refused.message(), end);
            else log.info("{}: {} during handshake", peer, end);
        }
    }

    /** Reads requests until DISC, EOF or a protocol error; returns why it ended. */
    private String transmission() throws IOException, ProtocolException, InterruptedException {
        Backend backend = session.export().backend();
        RequestValidator validator = new RequestValidator(session);
        writer = new ReplyWriter(transport, this::completed, this::abort);
        readerThread = Thread.currentThread();
        Thread writerThread = Thread.ofVirtual().name("jnbd-writer-" + peer).start(writer);
        intake = new Intake(transport, server.inputBuffers(), server.config().busyPoll().toNanos(), server.config().receiveTimeout());
        work = server.executorFor(backend);
        List<InFlight> batch = new ArrayList<>();
        // The budget may be held by this very batch's payloads: submit them before waiting for more.
        Intake.Leaser leaser = size -> {
            BufferPool.Lease lease = server.buffers().tryAcquire(size, 0);
            if (lease != null) return lease;
            submit(batch, backend);
            return server.buffers().acquire(size);
        };
        String end = "client disconnected";
        try {
            while (true) {
                Request r = intake.next();
                if (r == null) {
                    // Everything received so far is parsed: hand it over before waiting for more. Requests still
                    // being served will reply on their own time: then the CPU is better left to the I/O threads
                    // than spent polling for the next request.
                    submit(batch, backend);
                    if (!intake.fill(requestsInFlight() == 0)) {
                        end = stopRequested ? "closed by server shutdown" : "client disconnected";
                        break;
                    }
                    continue;
                }
                long received = System.nanoTime();
                stats.requests.increment();
                if (r.type() == Nbd.CMD_DISC) {
                    end = "client sent DISC";
                    break;
                }
                int error = validator.check(r);
                if (r.hasPayload() && r.length() > server.config().maxPayload()
                        && r.length() > server.config().writeDiscardLimit()) {
                    throw new ProtocolException("write of " + r.length() + " bytes is beyond any payload this server reads");
                }
                if (r.hasPayload() && error != 0) intake.discard(r.length());
                int bytes = error == 0 && needsBuffer(r, backend) ? bytePermits(r.length()) : 0;
                InFlight f = new InFlight(r, received, bytes);
                // Never block holding requests that are not yet submitted: their permits would never return.
                if (!inFlight.tryAcquire()) {
                    submit(batch, backend);
                    inFlight.acquire();
                }
                if (bytes > 0 && !byteBudget.tryAcquire(bytes)) {
                    submit(batch, backend);
                    byteBudget.acquire(bytes);
                }
                if (error != 0) {
                    replyError(f, error, errorMessage(r, error));
                    continue;
                }
                if (r.hasPayload() && r.length() > 0) {
                    // Only a client with nothing else in flight gets its write split: with more requests in
                    // flight the disk already works on one while the next arrives, and splitting measured
                    // level to 0.8x at QD2-8 (4 MiB direct writes, 22 Nov) against 1.3-1.7x at QD1.
                    int chunk = requestsInFlight() == 1 ? server.writeChunkSize(session.export(), r) : 0;
                    if (chunk > 0) {
                        new SplitWrite(f, backend, chunk).receive(leaser);
                        flushDeferred();
                        continue;
                    }
                    Payload payload = new Payload();
                    f.payload = payload;
                    try {
                        intake.receivePayload(r.length(), Intake.PIECE, leaser, (at, piece) -> payload.add(piece));
                    } catch (IOException | InterruptedException | RuntimeException e) {
                        completed(f);
                        throw e;
                    }
                }
                batch.add(f);
            }
        } finally {
            submit(batch, backend);
            // Serve what was already accepted, then let the writer drain and stop.
            boolean drained = inFlight.tryAcquire(window, 60, TimeUnit.SECONDS);
            writer.finish();
            writerThread.join(TimeUnit.SECONDS.toMillis(10));
            if (writerThread.isAlive()) {
                abort(); // wakes a writer stuck on a client that does not read
                writerThread.join();
            }
            if (drained) inFlight.release(window);
        }
        return end;
    }

    /**
     * Run to completion for small cached reads: when the page cache holds the data (preadv2 RWF_NOWAIT),
     * read it on this thread and add the reply to {@code ready}, so that a whole batch of small reads costs
     * one read system call each plus one gathering write. Returns false to leave the read to sendfile.
     */
    private boolean readIfCached(InFlight f, int fd, List<ReplyWriter.Part> ready) {
        Request r = f.request;
        BufferPool.Lease lease;
        try {
            lease = server.buffers().tryAcquire((int) r.length(), 0);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
        if (lease == null) return false;
        f.timing.diskStart = System.nanoTime();
        boolean hit;
        try {
            hit = NativeIo.preadIfCached(fd, lease.buffer(), r.offset());
        } catch (IOException e) {
            hit = false;
        }
        if (!hit) {
            lease.release();
            return false;
        }
        f.timing.diskEnd = System.nanoTime();
        stats.bytesRead.add(r.length());
        server.stats().bytesRead.add(r.length());
        ready.add(ReplyWriter.Part.withData(readHeader(r, r.offset(), (int) r.length(), true), lease.buffer().flip(), lease, f));
        return true;
    }

    /** Requests that hold an off-heap buffer while in flight (a write payload or a read not sent by sendfile). */
    private static boolean needsBuffer(Request r, Backend backend) {
        return r.type() == Nbd.CMD_WRITE || (r.type() == Nbd.CMD_READ && !backend.has(Backend.Trait.ZERO_COPY));
    }

    private static int bytePermits(long length) {
        return (int) Math.max(1, (length + 4095) / 4096);
    }

    /**
     * Sends a reply part. On the reader thread, replies made while a batch is being submitted are collected
     * and leave together in one gathering write at its end; elsewhere (I/O threads) they go out at once if
     * the socket takes them, else through the writer thread.
     */
    private void emit(ReplyWriter.Part part) {
        if (Thread.currentThread() == readerThread) deferred.add(part);
        else writer.sendFromWorker(part);
    }

    private void flushDeferred() {
        if (deferred.isEmpty()) return;
        writer.sendInline(new ArrayList<>(deferred));
        deferred.clear();
    }

    /** A cached read: from the page cache on this thread if it is there and small, else by sendfile. */
    private void sendCachedRead(InFlight f, FileChannel source, int fd) {
        Request r = f.request;
        if (r.length() == 0) {
            replyOk(f);
            return;
        }
        if (r.length() <= INLINE_READ_MAX && fd >= 0 && readIfCached(f, fd, deferred)) return;
        stats.bytesRead.add(r.length());
        server.stats().bytesRead.add(r.length());
        emit(ReplyWriter.Part.withFile(readHeader(r, r.offset(), (int) r.length(), true), source, fd, r.offset(), r.length(), f));
    }

    /** Requests read and not yet answered in full (each holds a permit of the window until its reply is sent). */
    private int requestsInFlight() {
        return window - inFlight.availablePermits();
    }

    /** The last part of a request's reply is on the wire (or the connection is gone). */
    private void completed(InFlight f) {
        f.releasePayload();
        if (f.bytePermits > 0) byteBudget.release(f.bytePermits);
        inFlight.release();
        server.stats().complete(f.timing, System.nanoTime());
    }

    /** Plans a batch with the export's scheduler and starts its operations. */
    private void submit(List<InFlight> batch, Backend backend) {
        if (batch.isEmpty()) {
            flushDeferred(); // e.g. error replies made while parsing
            return;
        }
        FileChannel source = backend.has(Backend.Trait.ZERO_COPY) ? backend.zeroCopySource() : null;
        List<Request> requests = new ArrayList<>(batch.size());
        java.util.Map<Request, InFlight> byRequest = new java.util.IdentityHashMap<>();
        for (InFlight f : batch) {
            requests.add(f.request);
            byRequest.put(f.request, f);
        }
        batch.clear();
        BatchScheduler.Plan plan = session.export().scheduler().plan(requests);
        List<Runnable> tasks = new ArrayList<>(plan.ops().size());
        List<Runnable> inline = new ArrayList<>();
        // Disk work worth doing here rather than on an I/O thread, if a slot is free (see INLINE_DISK).
        List<Runnable> onThisThread = new ArrayList<>();
        for (BatchScheduler.Op op : plan.ops()) {
            List<InFlight> members = new ArrayList<>(op.members().size());
            for (Request r : op.members()) members.add(byRequest.get(r));
            InFlight first = members.getFirst();
            Request r = first.request;
            // A sequential plan (reordering would change a result) runs every operation in order on one
            // I/O thread; only the others take the fast paths below.
            if (!plan.sequential()) {
                if (r.type() == Nbd.CMD_READ && source != null) {
                    // Cached reads never need the merged buffer: each member goes out by itself, zero-copy.
                    for (InFlight m : members) sendCachedRead(m, source, backend.zeroCopyFd());
                    continue;
                }
                if (r.type() == Nbd.CMD_READ && members.size() == 1) {
                    if (r.length() == 0) {
                        replyOk(first);
                        continue;
                    }
                    ReadPlan split = server.readPlan(session.export(), r, session.structuredReplies());
                    if (split.chunks() > 1) {
                        new SplitRead(first, backend, split).start();
                        continue;
                    }
                }
                if ((r.type() == Nbd.CMD_READ || r.type() == Nbd.CMD_WRITE) && backend.has(Backend.Trait.ASYNC)) {
                    // Started here, answered from its completion: no thread waits for it, and no hop to one.
                    inline.add(() -> serveAsync(op, members, backend));
                    continue;
                }
                if (r.type() == Nbd.CMD_WRITE && source != null && !op.fua() && op.length() <= INLINE_WRITE_MAX) {
                    // A write into the page cache is quicker done here than handed to an I/O thread and back
                    // to the writer: two wake-ups fewer per request, and one writer per connection keeps
                    // threads from spinning on the file's inode lock. bench/ab, 1M writes at QD8 (22 Nov,
                    // 5 rounds): server CPU 0.33 -> 0.25 s/GB, throughput +6% (median).
                    onThisThread.add(() -> serve(op, members, backend));
                    continue;
                }
            }
            tasks.add(() -> serve(op, members, backend));
        }
        if (backend.has(Backend.Trait.NEVER_BLOCKS) && !plan.sequential()) {
            // Nothing to wait for (RAM): hopping to an I/O thread would cost more than the work.
            inline.addAll(tasks);
            tasks.clear();
        } else if (tasks.size() == 1 && plan.ops().size() == 1 && plan.ops().getFirst().length() <= INLINE_DISK_MAX
                && requestsInFlight() == 1) {
            // The connection's only request, and small (a client at queue depth 1): this thread would only
            // wait for its reply, so it does the disk I/O itself and spares the wake-up of an I/O thread,
            // which on an idle VM costs as much as a small O_DIRECT read.
            onThisThread.addAll(tasks);
            tasks.clear();
        }
        inline.forEach(Runnable::run);
        if (!onThisThread.isEmpty()) {
            if (INLINE_DISK.tryAcquire()) {
                try {
                    onThisThread.forEach(Runnable::run);
                } finally {
                    INLINE_DISK.release();
                }
            } else {
                tasks.addAll(0, onThisThread);
            }
        }
        flushDeferred();
        if (tasks.isEmpty()) return;
        if (plan.sequential()) {
            work.execute(() -> tasks.forEach(Runnable::run));
        } else {
            for (Runnable t : tasks) work.execute(t);
        }
    }

    private static String errorMessage(Request r, int error) {
        return switch (error) {
            case Nbd.EPERM -> "export is read-only";
            case Nbd.ENOSPC -> "request runs past the end of the export";
            case Nbd.EOVERFLOW -> "request is larger than the maximum payload";
            default -> "invalid request " + r;
        };
    }

    /** Runs one disk operation and replies to every request it serves. */
    private void serve(BatchScheduler.Op op, List<InFlight> members, Backend backend) {
        InFlight first = members.getFirst();
        Request r = first.request;
        first.timing.diskStart = System.nanoTime();
        try {
            switch (op.type()) {
                case Nbd.CMD_READ -> {
                    readAndReply(op, members, backend);
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
                    stats.bytesWritten.add(op.length());
                    server.stats().bytesWritten.add(op.length());
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
                    blockStatus(first, backend);
                    return;
                }
                default -> throw new IllegalStateException("unvalidated command " + r);
            }
            markDiskDone(members);
            for (InFlight m : members) {
                m.releasePayload();
                replyOk(m);
            }
        } catch (Throwable t) {
            if (t instanceof InterruptedException) Thread.currentThread().interrupt();
            int error = NbdErrors.of(t);
            logFailure(r, error, t);
            markDiskDone(members);
            for (InFlight m : members) {
                m.releasePayload();
                replyError(m, error, t.getMessage() != null ? t.getMessage() : t.toString());
            }
        }
    }

    /**
     * A backend failure is worth an operator's attention (a full disk, a read-only file system, a broken
     * one), except a fast zero the backend declined and a request cut short by shutdown.
     */
    private void logFailure(Request r, int error, Throwable t) {
        if (error == Nbd.ENOTSUP || error == Nbd.ESHUTDOWN) log.debug("{}: {} failed: {}", peer, r, t.toString());
        else log.warn("{}: {} failed: {}", peer, r, t.toString());
    }

    /**
     * A read or write of a backend with {@link Backend.Trait#ASYNC}: started on this thread, replied to from
     * whichever thread completes it (the sends of a reply made off the reader go out as workers' do).
     */
    private void serveAsync(BatchScheduler.Op op, List<InFlight> members, Backend backend) {
        InFlight first = members.getFirst();
        first.timing.diskStart = System.nanoTime();
        if (op.type() == Nbd.CMD_WRITE) {
            List<ByteBuffer> bufs = new ArrayList<>(members.size());
            for (InFlight m : members) {
                if (m.payload != null) m.payload.addBuffersTo(bufs);
            }
            backend.writeAsync(op.offset(), bufs.toArray(ByteBuffer[]::new), op.fua()).whenComplete((v, err) -> {
                markDiskDone(members);
                if (err == null) {
                    stats.bytesWritten.add(op.length());
                    server.stats().bytesWritten.add(op.length());
                }
                for (InFlight m : members) {
                    m.releasePayload();
                    if (err == null) replyOk(m);
                    else replyFailed(m, unwrap(err));
                }
            });
            return;
        }
        BufferPool.Lease lease;
        try {
            lease = server.buffers().tryAcquire((int) op.length(), 0);
            if (lease == null) {
                flushDeferred(); // replies collected here hold buffers too
                lease = server.buffers().acquire((int) op.length());
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            for (InFlight m : members) replyError(m, Nbd.ESHUTDOWN, "server is shutting down");
            return;
        }
        BufferPool.Lease held = lease;
        backend.readAsync(op.offset(), held.buffer().duplicate()).whenComplete((v, err) -> {
            markDiskDone(members);
            if (err != null) {
                held.release();
                for (InFlight m : members) replyFailed(m, unwrap(err));
                return;
            }
            stats.bytesRead.add(op.length());
            server.stats().bytesRead.add(op.length());
            Releasable[] shares = Releasable.share(held, members.size());
            for (int i = 0; i < members.size(); i++) {
                InFlight m = members.get(i);
                Request r = m.request;
                ByteBuffer slice = held.buffer().slice((int) (r.offset() - op.offset()), (int) r.length());
                emit(ReplyWriter.Part.withData(readHeader(r, r.offset(), (int) r.length(), true), slice, shares[i], m));
            }
        });
    }

    private void replyFailed(InFlight m, Throwable t) {
        int error = NbdErrors.of(t);
        logFailure(m.request, error, t);
        replyError(m, error, t.getMessage() != null ? t.getMessage() : t.toString());
    }

    private static Throwable unwrap(Throwable t) {
        while (t instanceof java.util.concurrent.CompletionException && t.getCause() != null) t = t.getCause();
        return t;
    }

    private static void markDiskDone(List<InFlight> members) {
        long now = System.nanoTime();
        long start = members.getFirst().timing.diskStart;
        for (InFlight m : members) {
            m.timing.diskStart = start;
            m.timing.diskEnd = now;
        }
    }

    /** One backend read for the whole operation; each member's reply carries its own slice of the buffer. */
    private void readAndReply(BatchScheduler.Op op, List<InFlight> members, Backend backend)
            throws IOException, InterruptedException {
        BufferPool.Lease lease = server.buffers().tryAcquire((int) op.length(), 0);
        if (lease == null) {
            // Replies this reader has collected hold buffers too: send them before waiting for more.
            if (Thread.currentThread() == readerThread) flushDeferred();
            lease = server.buffers().acquire((int) op.length());
        }
        try {
            backend.read(op.offset(), lease.buffer());
        } catch (IOException | RuntimeException e) {
            lease.release();
            throw e;
        }
        markDiskDone(members);
        stats.bytesRead.add(op.length());
        server.stats().bytesRead.add(op.length());
        Releasable[] shares = Releasable.share(lease, members.size());
        for (int i = 0; i < members.size(); i++) {
            InFlight m = members.get(i);
            Request r = m.request;
            ByteBuffer slice = lease.buffer().slice((int) (r.offset() - op.offset()), (int) r.length());
            emit(ReplyWriter.Part.withData(readHeader(r, r.offset(), (int) r.length(), true), slice, shares[i], m));
        }
    }

    private void blockStatus(InFlight f, Backend backend) throws IOException {
        Request r = f.request;
        List<Extent> extents = backend.extents(r.offset(), r.length());
        List<BlockStatusDescriptor> out = new ArrayList<>();
        long left = r.length();
        for (Extent e : extents) {
            if (left <= 0) break;
            long len = Math.min(Math.min(e.length(), left), 0xFFFF_F000L); // stays within 32 bits, 4K-aligned
            out.add(new BlockStatusDescriptor(len, e.flags()));
            left -= len;
            if (r.has(Nbd.CMD_FLAG_REQ_ONE)) break;
        }
        if (out.isEmpty()) out.add(new BlockStatusDescriptor(Math.min(r.length(), 0xFFFF_F000L), 0));
        ByteBuffer b = ByteBuffer.allocate(Chunks.blockStatusSize(out.size()));
        Chunks.blockStatus(b, Nbd.REPLY_FLAG_DONE, r.cookie(), session.metaContextId(), out);
        markDiskDone(List.of(f));
        emit(ReplyWriter.Part.of(b.flip(), f));
    }

    /** The header in front of read data: a simple reply, or an OFFSET_DATA chunk. */
    private ByteBuffer readHeader(Request r, long offset, int length, boolean done) {
        ByteBuffer h;
        if (session.structuredReplies()) {
            h = ByteBuffer.allocate(Chunks.OFFSET_DATA_PREFIX);
            Chunks.offsetDataPrefix(h, done ? Nbd.REPLY_FLAG_DONE : 0, r.cookie(), offset, length);
        } else {
            h = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE);
            SimpleReply.encode(h, 0, r.cookie());
        }
        return h.flip();
    }

    private void replyOk(InFlight f) {
        Request r = f.request;
        ByteBuffer h;
        if (r.type() == Nbd.CMD_READ && session.structuredReplies()) {
            h = ByteBuffer.allocate(Nbd.STRUCTURED_REPLY_SIZE);
            Chunks.none(h, r.cookie());
        } else {
            h = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE);
            SimpleReply.encode(h, 0, r.cookie());
        }
        emit(ReplyWriter.Part.of(h.flip(), f));
    }

    private void replyError(InFlight f, int error, String message) {
        Request r = f.request;
        stats.errors.increment();
        ByteBuffer h;
        if (session.structuredReplies()) {
            String msg = message.length() > 1024 ? message.substring(0, 1024) : message;
            h = ByteBuffer.allocate(Chunks.errorSize(msg));
            Chunks.error(h, Nbd.REPLY_FLAG_DONE, r.cookie(), error, msg);
        } else {
            h = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE);
            SimpleReply.encode(h, error, r.cookie());
        }
        emit(ReplyWriter.Part.of(h.flip(), f));
    }

    /**
     * A large read split into chunks read in parallel, each sent as its own OFFSET_DATA chunk as soon as the
     * disk delivers it, in whatever order that is: the network starts before the disk has finished the
     * request (gmblock's synchronized multi-stream sends). At most {@code streams} chunks are read at once.
     */
    private final class SplitRead {
        private final InFlight flight;
        private final Request request;
        private final Backend backend;
        private final ReadPlan plan;
        private final AtomicInteger next = new AtomicInteger();
        private int unsent;

        SplitRead(InFlight flight, Backend backend, ReadPlan plan) {
            this.flight = flight;
            this.request = flight.request;
            this.backend = backend;
            this.plan = plan;
            this.unsent = plan.chunks();
        }

        void start() {
            for (int i = 0; i < Math.min(plan.streams(), plan.chunks()); i++) submitNext();
        }

        private void submitNext() {
            int index = next.getAndIncrement();
            if (index < plan.chunks()) work.execute(() -> readChunk(index));
        }

        private void readChunk(int index) {
            long offset = request.offset() + (long) index * plan.chunkSize();
            int length = (int) Math.min(plan.chunkSize(), request.offset() + request.length() - offset);
            BufferPool.Lease lease = null;
            int error = 0;
            String message = null;
            try {
                lease = server.buffers().acquire(length);
                if (index == 0) flight.timing.diskStart = System.nanoTime();
                backend.read(offset, lease.buffer());
                lease.buffer().flip();
            } catch (Throwable t) {
                if (lease != null) lease.release();
                lease = null;
                error = NbdErrors.of(t);
                message = t.getMessage() != null ? t.getMessage() : t.toString();
                logFailure(request, error, t);
            }
            submitNext();
            // Ordering the sends under one lock lets the last chunk to arrive carry the DONE flag.
            synchronized (this) {
                boolean last = --unsent == 0;
                InFlight completes = last ? flight : null;
                if (last) flight.timing.diskEnd = System.nanoTime();
                if (lease != null) {
                    stats.bytesRead.add(length);
                    server.stats().bytesRead.add(length);
                    emit(ReplyWriter.Part.withData(readHeader(request, offset, length, last), lease.buffer(), lease, completes));
                } else {
                    stats.errors.increment();
                    ByteBuffer h = ByteBuffer.allocate(Chunks.errorOffsetSize(message));
                    Chunks.errorOffset(h, last ? Nbd.REPLY_FLAG_DONE : 0, request.cookie(), error, message, offset);
                    emit(ReplyWriter.Part.of(h.flip(), completes));
                }
            }
        }
    }

    /**
     * A large direct write whose payload goes to the disk chunk by chunk as it arrives, so that the disk
     * writes the first chunks while the network still carries the last (the overlap of split reads, turned
     * round). The reply leaves when every chunk is written; the first failure, if any, is the reply.
     */
    private final class SplitWrite {
        private final InFlight flight;
        private final Backend backend;
        private final int chunk;
        /** Chunks submitted and not yet written, plus one held by the reader until the payload is all in. */
        private final AtomicInteger pending = new AtomicInteger(1);
        private volatile int error;
        private volatile String message;
        private volatile boolean receiveFailed;

        SplitWrite(InFlight flight, Backend backend, int chunk) {
            this.flight = flight;
            this.backend = backend;
            this.chunk = chunk;
        }

        /** On the reader: receives the payload piece by piece, each piece going to an I/O thread once it is in. */
        void receive(Intake.Leaser leaser) throws IOException, InterruptedException {
            Request r = flight.request;
            try {
                intake.receivePayload(r.length(), chunk, leaser, (at, piece) -> {
                    long offset = r.offset() + at;
                    if (at == 0) flight.timing.diskStart = System.nanoTime();
                    pending.incrementAndGet();
                    try {
                        work.execute(() -> writeChunk(offset, piece));
                    } catch (RuntimeException e) { // the pool is shutting down
                        piece.release();
                        fail(Nbd.ESHUTDOWN, "server is shutting down");
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
                if (error == 0) backend.write(offset, piece.buffer(), flight.request.has(Nbd.CMD_FLAG_FUA));
            } catch (Throwable t) {
                if (t instanceof InterruptedException) Thread.currentThread().interrupt();
                int e = NbdErrors.of(t);
                logFailure(flight.request, e, t);
                fail(e, t.getMessage() != null ? t.getMessage() : t.toString());
            } finally {
                piece.release();
                chunkDone();
            }
        }

        private synchronized void fail(int e, String why) {
            if (error == 0) {
                error = e;
                message = why;
            }
        }

        private void chunkDone() {
            if (pending.decrementAndGet() != 0) return;
            flight.timing.diskEnd = System.nanoTime();
            flight.releasePayload();
            if (receiveFailed) {
                completed(flight); // the connection is going: no reply
            } else if (error != 0) {
                replyError(flight, error, message);
            } else {
                stats.bytesWritten.add(flight.request.length());
                server.stats().bytesWritten.add(flight.request.length());
                replyOk(flight);
            }
        }
    }
}
