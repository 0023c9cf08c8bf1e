package io.jnbd.client;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;

import java.io.IOException;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The sending side of a connection. Submitting never waits, neither for a request slot nor for another
 * thread's write: a request that cannot go out at once joins a queue, which this connection's sender thread
 * works off in submission order whenever a slot is free.
 *
 * <p>A request goes out on the submitting thread itself only when that cannot block: nothing is queued ahead
 * of it, a slot is free, no other thread is writing, its payload is small, and the bytes written but not yet
 * answered stay well inside the socket's send buffer (a reply proves the server read its request, so those
 * bytes bound what can still be in the buffer). The socket write then only copies into the kernel. This is
 * also what lets a completion callback on the reader thread submit: were the reader to block in a write,
 * it could no longer read the replies whose arrival lets the server go on reading.
 */
final class Sender {

    /** Largest payload written on the submitting thread. */
    static final int INLINE_MAX_PAYLOAD = 64 * 1024;
    /** Bounds on one gathering write of queued requests: the JDK's writev takes up to IOV_MAX (1024) buffers. */
    private static final int MAX_BATCH = 256;
    private static final long MAX_BATCH_BYTES = 1 << 20;

    private final Connection connection;
    private final Transport transport;
    private final Semaphore window;
    private final ReentrantLock lock = new ReentrantLock();
    /**
     * Requests are taken out to be sent only while holding {@link #lock} (others leave it only once settled),
     * so an empty queue seen under the lock means no earlier submission is still waiting to go out.
     */
    private final ConcurrentLinkedQueue<Pending> queue = new ConcurrentLinkedQueue<>();
    private final AtomicInteger queued = new AtomicInteger();
    /** Bytes of requests written and not yet answered. */
    private final AtomicLong unanswered = new AtomicLong();
    private final long inlineBudget;
    private final ByteBuffer header = ByteBuffer.allocateDirect(Nbd.REQUEST_SIZE);
    private final Thread thread;
    /** Names the virtual threads that deliver the outcomes the sender thread arrives at. */
    private final String completionThreadName;
    /**
     * Requests submitted on this connection's reader thread, mostly by completion callbacks submitting the
     * next request, held until the reader has worked through the replies it already has: then they go out
     * together, one write for many. Sent one by one, they were a system call per request (75,554 writes for
     * 75,486 reads at 4k QD32), each a TCP segment that woke the server on its own.
     */
    private final ConcurrentLinkedQueue<Pending> corked = new ConcurrentLinkedQueue<>();
    /** The connection's reader thread; set before the connection is used. */
    private volatile Thread reader;
    /** Headers of one batch of corked requests, and its buffers for the gathering write. */
    private ByteBuffer batchHeaders = ByteBuffer.allocateDirect(16 * Nbd.REQUEST_SIZE);
    private final java.util.ArrayList<Pending> batch = new java.util.ArrayList<>();
    private final java.util.ArrayList<ByteBuffer> batchBuffers = new java.util.ArrayList<>();

    Sender(Connection connection, Transport transport, int requestsInFlight, String connectionName) {
        this.connection = connection;
        this.transport = transport;
        this.window = new Semaphore(requestsInFlight);
        // TLS adds a few dozen bytes per record of up to 16 KiB: well inside the half of the buffer kept free.
        this.inlineBudget = inlineBudget(transport.socket);
        // A platform thread: a virtual one would switch the socket to non-blocking mode for good, and the
        // reader's blocking reads would then each pay for an extra poll.
        this.thread = Thread.ofPlatform().daemon().name("jnbd-sender-" + connectionName).unstarted(this::run);
        this.completionThreadName = "jnbd-completion-" + connectionName;
    }

    /**
     * Half the send buffer, since the kernel also counts its own overhead against it; at most 256 KiB. At
     * 64 KiB, 4k writes at QD32 (132 KiB unanswered) went half through the sender thread: 48.5K IOPS against
     * 75.7K at 256 KiB (bench/client), where loopback's send buffer is 2 MiB.
     */
    private static long inlineBudget(java.nio.channels.SocketChannel channel) {
        try {
            return Math.min(256 * 1024, channel.getOption(StandardSocketOptions.SO_SNDBUF) / 2);
        } catch (IOException | UnsupportedOperationException e) {
            return 16 * 1024;
        }
    }

    void start(Thread readerThread) {
        this.reader = readerThread;
        thread.start();
    }

    // Every taking of the lock goes through these, so that the futures completed meanwhile (a reply that beat the
    // write, a failed write, a connection found dead) are completed only once the thread holds no lock of the
    // client: their callbacks may then submit and wait for their own requests (see Deliveries).

    private void lock() {
        lock.lock();
        Deliveries.locked();
    }

    private boolean tryLock() {
        if (!lock.tryLock()) return false;
        Deliveries.locked();
        return true;
    }

    private void unlock() {
        lock.unlock();
        Deliveries.unlocked();
    }

    /** For tests: callbacks must never run holding the lock. */
    boolean lockedByCurrentThread() {
        return lock.isHeldByCurrentThread();
    }

    /** Requests waiting to be sent. */
    int queued() {
        return queued.get();
    }

    /**
     * Sends {@code p} now if that cannot block, else queues it for the sender thread. Never waits. A virtual
     * thread writes only where the transport can without the JDK's socket write (see NativeSend), and queues
     * otherwise: the JDK puts a socket in non-blocking mode for good once a virtual thread has used it, and from
     * then on every blocking read by the reader thread costs a failed read and a poll. Within a
     * {@link SendBatch}, the request is held until the batch ends.
     */
    void submit(Pending p) {
        Thread current = Thread.currentThread();
        if (current == reader) {
            corked.add(p);
            return;
        }
        SendBatch held = SendBatch.current();
        if (held != null) {
            corked.add(p);
            held.hold(this);
            return;
        }
        if (smallEnoughInline(p) && mayWriteOn(current)
                && queue.isEmpty() && tryLock()) {
            try {
                if (queue.isEmpty() && unanswered.get() + p.wireBytes() <= inlineBudget && window.tryAcquire()) {
                    write(p);
                    return;
                }
            } finally {
                unlock();
            }
        }
        queue.add(p);
        queued.incrementAndGet();
        LockSupport.unpark(thread);
    }

    /**
     * Sends what was submitted on the reader thread since it last waited, or in a {@link SendBatch} that ended:
     * as one gathering write while the requests fit the conditions of an inline write (see {@link #submit}),
     * the rest through the queue, in submission order. Called by the reader thread before it waits for more
     * bytes, and by the thread ending a batch.
     */
    void uncork() {
        if (corked.isEmpty()) return;
        // Taken out with poll, never peeked at first: the reader and a thread ending its SendBatch may both be
        // here, and a request one peeked at could be taken by the other, leaving it to poll (and lose) the next.
        Pending spilled = null;
        if (queue.isEmpty() && mayWriteOn(Thread.currentThread()) && tryLock()) {
            try {
                long bytes = unanswered.get();
                for (Pending p; queue.isEmpty() && (p = corked.poll()) != null; ) {
                    if (!smallEnoughInline(p) || bytes + p.wireBytes() > inlineBudget || !window.tryAcquire()) {
                        spilled = p;
                        break;
                    }
                    batch.add(p);
                    bytes += p.wireBytes();
                }
                writeBatch();
            } finally {
                unlock();
            }
        }
        boolean queuedAny = false;
        if (spilled != null) {
            queue.add(spilled);
            queued.incrementAndGet();
            queuedAny = true;
        }
        for (Pending p; (p = corked.poll()) != null; ) {
            queue.add(p);
            queued.incrementAndGet();
            queuedAny = true;
        }
        if (queuedAny) LockSupport.unpark(thread);
    }

    /** Writes {@link #batch}, each request holding a slot. Holding the lock. */
    private void writeBatch() {
        if (batch.isEmpty()) return;
        if (batchHeaders.capacity() < batch.size() * Nbd.REQUEST_SIZE) {
            batchHeaders = ByteBuffer.allocateDirect(Integer.highestOneBit(batch.size() * Nbd.REQUEST_SIZE) * 2);
        }
        batchHeaders.clear();
        batchBuffers.clear();
        int sending = 0;
        try {
            for (Pending p : batch) {
                if (!p.startSending()) {
                    window.release(); // settled while corked: never sent
                    continue;
                }
                unanswered.addAndGet(p.wireBytes());
                batch.set(sending++, p);
                if (!connection.register(p)) continue;
                int at = batchHeaders.position();
                new Request(p.flags, p.type, p.cookie, p.offset, p.length).encode(batchHeaders);
                batchBuffers.add(batchHeaders.slice(at, Nbd.REQUEST_SIZE));
                if (p.hasPayload()) batchBuffers.add(p.data.duplicate());
            }
            if (!batchBuffers.isEmpty()) transport.write(batchBuffers.toArray(ByteBuffer[]::new));
            for (int i = 0; i < sending; i++) batch.get(i).sent = true;
        } catch (IOException e) {
            connection.fail(new NbdConnectionException("connection to " + connection.peer() + " failed while sending "
                + batch.size() + " request(s): " + e.getMessage(), e));
        } finally {
            for (int i = 0; i < sending; i++) {
                if (batch.get(i).hasPayload()) connection.letGo(batch.get(i));
            }
            batch.clear();
            batchBuffers.clear();
        }
    }

    private boolean mayWriteOn(Thread t) {
        return !t.isVirtual() || transport.writesFromVirtualThreads();
    }

    /**
     * No payload, or a small one in memory: a file's payload may have to come from the disk first, so it is
     * never written on a submitting (or the reader) thread.
     */
    private static boolean smallEnoughInline(Pending p) {
        return !p.hasPayload() || (p.file == null && p.length <= INLINE_MAX_PAYLOAD);
    }

    /** Writes a request's header and then its payload from elsewhere, straight into the socket. */
    interface Streamer {
        void stream(java.nio.channels.SocketChannel to, ByteBuffer header) throws IOException;
    }

    /**
     * Writes {@code p}, a WRITE whose payload {@code streamer} puts into the socket, on the calling thread and
     * before returning: for a payload that is only available now, such as another connection's reply being
     * spliced across. Waits for a slot and for the socket (behind other writers). Returns whether the streamer
     * ran; if not, the request has been given its outcome (a dead connection, a timeout) and nothing was sent.
     * If the streamer fails, so does this connection (it is left in the middle of a payload), and the
     * exception is passed on. Not on this connection's own reader thread, whose replies free the slots.
     */
    boolean writeNow(Pending p, Streamer streamer) throws IOException {
        try {
            while (!window.tryAcquire(10, TimeUnit.MILLISECONDS)) {
                if (!connection.alive() || connection.pastDeadline(p)) {
                    connection.abandon(p);
                    return false;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            connection.abandon(p);
            throw new java.io.InterruptedIOException("interrupted while waiting to send " + p.describe());
        }
        lock();
        try {
            if (!p.startSending()) {
                window.release();
                return false;
            }
            unanswered.addAndGet(p.wireBytes());
            try {
                if (!connection.register(p)) return false;
                header.clear();
                new Request(p.flags, p.type, p.cookie, p.offset, p.length).encode(header);
                header.flip();
                streamer.stream(transport.socket, header);
                p.sent = true;
                return true;
            } catch (IOException | RuntimeException e) {
                connection.fail(new NbdConnectionException("connection to " + connection.peer() + " failed while sending "
                    + p.describe() + ": " + e.getMessage(), e));
                throw e;
            } finally {
                connection.letGo(p);
            }
        } finally {
            unlock();
        }
    }

    /** A request that timed out while queued: drop it now rather than when it reaches the head. */
    void forget(Pending p) {
        if (queue.remove(p)) queued.decrementAndGet();
    }

    /** The request's reply has ended (or the connection has): its slot and its bytes are free again. */
    void answered(Pending p) {
        unanswered.addAndGet(-p.wireBytes());
        window.release();
        if (!queue.isEmpty()) LockSupport.unpark(thread);
    }

    /** Runs {@code action} on each request still queued. */
    void forEachQueued(java.util.function.Consumer<Pending> action) {
        queue.forEach(action);
    }

    /** Some request still queued has a caller waiting for it. */
    boolean hasWaiting() {
        return queue.stream().anyMatch(p -> !p.settled());
    }

    /** Takes every queued (or corked) request out, for the connection to fail them. */
    Pending poll() {
        Pending p = queue.poll();
        if (p != null) {
            queued.decrementAndGet();
            return p;
        }
        return corked.poll();
    }

    /** Wakes the sender thread, e.g. to notice that the connection has died. */
    void wake() {
        LockSupport.unpark(thread);
    }

    void join(long millis) throws InterruptedException {
        thread.join(millis);
    }

    /**
     * Writes a DISC once the socket is free, and after it TLS's close_notify; gives up if another write still
     * blocks the socket after {@code millis}.
     */
    void disconnect(long millis) {
        try {
            if (!lock.tryLock(millis, TimeUnit.MILLISECONDS)) return;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return;
        }
        Deliveries.locked();
        try {
            header.clear();
            new Request(0, Nbd.CMD_DISC, 0, 0, 0).encode(header);
            header.flip();
            transport.write(header);
            transport.endWrites();
        } catch (IOException ignored) {
            // Closing anyway.
        } finally {
            unlock();
        }
    }

    private void run() {
        Deliveries.handOffFromThisThread(completionThreadName);
        while (connection.alive()) {
            lock();
            try {
                drain();
            } finally {
                unlock();
            }
            // Woken by a submission that queued, or by a slot freed while requests wait.
            LockSupport.park(this);
        }
    }

    /**
     * Sends queued requests in order while slots last: those that arrived together in one gathering write, as
     * {@link #uncork} does. Written one by one, a proxy's requests (submitted by a virtual thread, so always
     * queued) were a system call each, a fifth of the proxy's CPU at 4k QD32. Holding the lock.
     */
    private void drain() {
        long batchBytes = 0;
        for (Pending p; (p = queue.peek()) != null && connection.alive(); ) {
            if (p.settled()) {
                forget(p);
                continue;
            }
            if (!window.tryAcquire()) break;
            // Removed by identity, not polled: a timeout may have taken it out of the queue since the peek.
            if (!queue.remove(p)) {
                window.release();
                continue;
            }
            queued.decrementAndGet();
            if (p.file != null) {
                writeBatch();
                batchBytes = 0;
                write(p);
                continue;
            }
            batch.add(p);
            batchBytes += p.wireBytes();
            if (batch.size() == MAX_BATCH || batchBytes >= MAX_BATCH_BYTES) {
                writeBatch();
                batchBytes = 0;
            }
        }
        writeBatch();
    }

    /** Writes one request. Holding the lock and a slot, which the request keeps until it is answered. */
    private void write(Pending p) {
        if (!p.startSending()) {
            // Its outcome was decided (a timeout, a dead connection) while it waited: never sent.
            window.release();
            return;
        }
        unanswered.addAndGet(p.wireBytes());
        try {
            if (!connection.register(p)) return;
            header.clear();
            new Request(p.flags, p.type, p.cookie, p.offset, p.length).encode(header);
            header.flip();
            if (p.file != null) {
                transport.write(header, p.file.channel(), p.file.position(), p.length);
            } else if (p.hasPayload()) {
                transport.write(header, p.data.duplicate());
            } else {
                transport.write(header);
            }
            p.sent = true;
        } catch (IOException e) {
            connection.fail(new NbdConnectionException("connection to " + connection.peer() + " failed while sending "
                + p.describe() + ": " + e.getMessage(), e));
        } finally {
            if (p.hasPayload()) connection.letGo(p);
        }
    }
}
