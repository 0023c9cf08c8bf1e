package io.jnbd.server;

import io.jnbd.server.io.Releasable;
import io.jnbd.server.net.Transport;
import java.io.IOException;
import java.nio.ByteBuffer;
import io.jnbd.server.io.PageCacheSource;
import java.util.ArrayList;
import java.util.List;
import java.util.ArrayDeque;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;

/**
 * Writes a connection's replies. The reader sends what it made itself, with whatever was queued ahead of it;
 * I/O threads send only what the socket takes without waiting and queue the rest for the writer thread, so a
 * client that stops reading stalls its own threads, never the shared I/O threads. Replies that are ready
 * together leave in one gathering write.
 */
final class ReplyWriter implements Runnable {
    /** How many queued parts one gathering write may carry. */
    private static final int MAX_GATHER = 64;

    /**
     * One piece of output: header bytes, then either a buffer of data or a range of a file to sendfile.
     * {@code completes}: the request whose reply ends with this part, or null if more parts follow.
     * {@code lease}: released once the part is on the wire.
     */
    record Part(ByteBuffer header, ByteBuffer data, Releasable lease, PageCacheSource file, long filePosition,
                long fileLength, InFlight completes) {
        static Part of(ByteBuffer header, InFlight completes) {
            return new Part(header, null, null, null, 0, 0, completes);
        }

        static Part withData(ByteBuffer header, ByteBuffer data, Releasable lease, InFlight completes) {
            return new Part(header, data, lease, null, 0, 0, completes);
        }

        static Part withFile(ByteBuffer header, PageCacheSource file, long position, long length, InFlight completes) {
            return new Part(header, null, null, file, position, length, completes);
        }

        void release() {
            if (lease != null) lease.release();
        }
    }

    private static final Part END = Part.of(ByteBuffer.allocate(0), null);

    private final Transport transport;
    /** Parts waiting for the writer thread, in wire order. Guarded by queueLock. */
    private final ArrayDeque<Part> queue = new ArrayDeque<>();
    private final ReentrantLock queueLock = new ReentrantLock();
    private final Condition queued = queueLock.newCondition();
    private final Consumer<InFlight> onRequestCompleted;
    private final Runnable onFailure;
    /** Set under queueLock, so that no part can be queued after the failure's final drain. */
    private volatile boolean failed;
    /** System.nanoTime() when the write in progress started, or 0: lets the server spot clients that stopped reading. */
    private volatile long busySince;
    /**
     * Whoever holds it owns the socket. Parts leave the queue only under it, so a thread that holds it and
     * finds the queue empty knows that nothing else is owed to the wire before its own bytes.
     */
    private final ReentrantLock socketLock = new ReentrantLock();

    ReplyWriter(Transport transport, Consumer<InFlight> onRequestCompleted, Runnable onFailure) {
        this.transport = transport;
        this.onRequestCompleted = onRequestCompleted;
        this.onFailure = onFailure;
    }

    /** Queues a part behind everything already queued. */
    void send(Part part) {
        if (part.completes != null) part.completes.timing.queued = System.nanoTime();
        enqueue(part, false);
    }

    private void enqueue(Part part, boolean first) {
        queueLock.lock();
        try {
            if (!failed) {
                if (first) queue.addFirst(part);
                else queue.addLast(part);
                queued.signal();
                return;
            }
        } finally {
            queueLock.unlock();
        }
        releaseAll(List.of(part));
    }

    private boolean queueEmpty() {
        queueLock.lock();
        try {
            return queue.isEmpty();
        } finally {
            queueLock.unlock();
        }
    }

    /**
     * Sends on the caller's thread, together with whatever is queued ahead of it (which must leave first), rather
     * than handing the parts to the writer thread: a part queued for it waits until that virtual thread is
     * scheduled, which in a storm of 64 clients on two vCPUs took 100-700 ms for the 2-4% of replies that went
     * that way and made the whole read p99 (bench/boot, 28 Nov). If the socket is in use the caller waits for it;
     * only a connection's own reader calls this, so a client slow to read stalls the one thread that is its own.
     */
    void sendInline(List<Part> parts) {
        long now = System.nanoTime();
        for (Part p : parts) {
            if (p.completes != null) p.completes.timing.queued = now;
        }
        socketLock.lock();
        try {
            List<Part> batch = new ArrayList<>(parts.size() + 8);
            boolean gone;
            queueLock.lock();
            try {
                gone = failed;
                // Never the end marker: that is the writer thread's to take, and the reader sends nothing after it.
                if (!gone) while (!queue.isEmpty() && queue.peekFirst() != END) batch.add(queue.pollFirst());
            } finally {
                queueLock.unlock();
            }
            if (gone) { // the failure's drain released what was queued; ours are released here
                releaseAll(parts);
                return;
            }
            batch.addAll(parts);
            try {
                write(batch);
            } catch (IOException e) {
                fail(batch);
            }
        } finally {
            socketLock.unlock();
        }
    }

    /**
     * For I/O threads: sends on the caller's thread only what the socket takes without waiting, and leaves
     * the rest to the writer thread, so a disk thread never blocks on a client yet small replies skip the
     * hand-off to the writer.
     */
    void sendFromWorker(Part part) {
        if (!transport.canSendNow() || part.file != null || failed || !socketLock.tryLock()) {
            send(part);
            return;
        }
        try {
            if (!queueEmpty()) {
                send(part);
                return;
            }
            if (part.completes != null) part.completes.timing.queued = System.nanoTime();
            ByteBuffer[] bufs = part.data == null ? new ByteBuffer[] {part.header} : new ByteBuffer[] {part.header, part.data};
            try {
                transport.sendNow(bufs);
            } catch (IOException e) {
                fail(new ArrayList<>(List.of(part)));
                return;
            }
            if (part.header.hasRemaining() || (part.data != null && part.data.hasRemaining())) {
                // Half of it is on the wire: the rest must be the very next bytes, ahead of anything that
                // other threads queued meanwhile. Still holding the socket, so the writer has not drained yet.
                enqueue(part, true);
            } else {
                List<Part> one = new ArrayList<>(List.of(part));
                complete(one, 0, 1);
            }
        } finally {
            socketLock.unlock();
        }
    }

    /**
     * Like {@link #sendFromWorker(Part)} for several replies made together (see backend.Completions): what the
     * socket takes now leaves in one gathering write, the rest goes to the writer thread, in order.
     */
    void sendFromWorker(List<Part> parts) {
        if (parts.size() == 1) {
            sendFromWorker(parts.getFirst());
            return;
        }
        if (!transport.canSendNow() || failed || parts.stream().anyMatch(p -> p.file != null) || !socketLock.tryLock()) {
            parts.forEach(this::send);
            return;
        }
        try {
            if (!queueEmpty()) {
                parts.forEach(this::send);
                return;
            }
            long now = System.nanoTime();
            List<ByteBuffer> gather = new ArrayList<>(parts.size() * 2);
            for (Part p : parts) {
                if (p.completes != null) p.completes.timing.queued = now;
                gather.add(p.header);
                if (p.data != null) gather.add(p.data);
            }
            ByteBuffer[] bufs = gather.toArray(ByteBuffer[]::new);
            long left = 0;
            for (ByteBuffer b : bufs) left += b.remaining();
            try {
                // The socket takes a bounded number of buffers per call: go on while it takes more.
                for (long n; left > 0 && (n = transport.sendNow(bufs)) > 0; ) left -= n;
            } catch (IOException e) {
                fail(new ArrayList<>(parts));
                return;
            }
            int done = 0;
            while (done < parts.size() && !parts.get(done).header.hasRemaining()
                   && (parts.get(done).data == null || !parts.get(done).data.hasRemaining())) done++;
            // The rest, the first perhaps half on the wire, must be the very next bytes: still holding the socket,
            // they go to the head of the queue, last first.
            for (int i = parts.size() - 1; i >= done; i--) enqueue(parts.get(i), true);
            complete(new ArrayList<>(parts.subList(0, done)), 0, done);
        } finally {
            socketLock.unlock();
        }
    }

    /**
     * How long the write in progress has gone without the client taking a byte, in nanoseconds; 0 when nothing
     * is being written. Counted from the last progress, so that a client reading slowly but steadily is not
     * taken for one that stopped.
     */
    long stalledNanos(long now) {
        long since = busySince;
        return since == 0 ? 0 : now - Math.max(since, transport.lastSentNanos());
    }

    /** True once the socket failed or the writer stopped: nothing more reaches the client. */
    boolean failed() {
        return failed;
    }

    /** Asks the writer to stop once everything queued so far is written. */
    void finish() {
        queueLock.lock();
        try {
            queue.addLast(END);
            queued.signal();
        } finally {
            queueLock.unlock();
        }
    }

    @Override
    public void run() {
        List<Part> batch = new ArrayList<>(MAX_GATHER);
        try {
            while (true) {
                queueLock.lock();
                try {
                    while (queue.isEmpty()) queued.await();
                } finally {
                    queueLock.unlock();
                }
                socketLock.lock();
                try {
                    queueLock.lock();
                    try {
                        while (!queue.isEmpty() && batch.size() < MAX_GATHER) batch.add(queue.pollFirst());
                    } finally {
                        queueLock.unlock();
                    }
                    boolean end = write(batch);
                    if (end) return;
                } finally {
                    socketLock.unlock();
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (IOException e) {
            fail(batch);
            batch.clear();
        } finally {
            releaseAll(batch);
            batch.clear();
            queueLock.lock();
            List<Part> rest;
            try {
                failed = true; // nothing more is written: later parts are released as they come
                rest = new ArrayList<>(queue);
                queue.clear();
            } finally {
                queueLock.unlock();
            }
            releaseAll(rest);
        }
    }

    /** The socket failed: no more writes; everything held is released and the connection is shut down. */
    private void fail(List<Part> held) {
        List<Part> rest;
        queueLock.lock();
        try {
            failed = true;
            rest = new ArrayList<>(queue);
            queue.clear();
            queued.signal();
        } finally {
            queueLock.unlock();
        }
        releaseAll(held);
        releaseAll(rest);
        onFailure.run();
    }

    private void releaseAll(List<Part> parts) {
        for (Part p : parts) {
            p.release();
            if (p.completes != null) onRequestCompleted.accept(p.completes);
        }
    }

    /**
     * Writes a batch; returns true if it reached the end marker. Parts that are on the wire are released and
     * removed from {@code batch}; whatever is left (behind an end marker, or after a failure) the caller releases.
     */
    private boolean write(List<Part> batch) throws IOException {
        List<ByteBuffer> gather = new ArrayList<>(batch.size() * 2);
        int sent = 0;
        busySince = System.nanoTime();
        try {
            for (int i = 0; i < batch.size(); i++) {
                Part p = batch.get(i);
                if (p == END) {
                    flush(gather);
                    complete(batch, sent, i);
                    sent = i;
                    return true;
                }
                if (p.file != null) {
                    flush(gather);
                    transport.sendFile(p.header, p.file, p.filePosition, p.fileLength);
                    complete(batch, sent, i + 1);
                    sent = i + 1;
                    continue;
                }
                gather.add(p.header);
                if (p.data != null) gather.add(p.data);
            }
            flush(gather);
            complete(batch, sent, batch.size());
            sent = batch.size();
            return false;
        } finally {
            busySince = 0;
            batch.subList(0, sent).clear();
        }
    }

    private void complete(List<Part> batch, int from, int to) {
        for (int i = from; i < to; i++) {
            Part p = batch.get(i);
            p.release();
            if (p.completes != null) onRequestCompleted.accept(p.completes);
        }
    }

    private void flush(List<ByteBuffer> gather) throws IOException {
        if (gather.isEmpty()) return;
        transport.send(gather.toArray(ByteBuffer[]::new));
        gather.clear();
    }
}
