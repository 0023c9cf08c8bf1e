package io.jnbd.client;

import io.jnbd.protocol.Chunks;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.ProtocolException;
import io.jnbd.protocol.Request;
import io.jnbd.protocol.SimpleReply;
import io.jnbd.protocol.StructuredReplyHeader;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One NBD connection in the transmission phase. Any thread may submit requests: senders take turns under a
 * lock and write header and payload in one gathering write. A single reader thread owns the receive side:
 * it matches each reply to its request by cookie and places read data straight into the caller's buffer.
 */
final class Connection {

    /** Block status chunks are bounded by the spec's advice (2^20 extents); more is a broken or hostile server. */
    private static final long MAX_BLOCK_STATUS_CHUNK = 4 + 8L * (1 << 20);
    /** Error chunks carry at most a 4096-byte message plus fixed fields. */
    private static final long MAX_ERROR_CHUNK = 6 + io.jnbd.protocol.Strings.MAX_STRING + 8;

    private final SocketChannel channel;
    private final String peer;
    private final ExportInfo info;
    private final int baseAllocationId;
    private final ScheduledExecutorService timer;
    private final long requestTimeoutNanos;
    private final Semaphore window;
    private final Map<Long, Pending> inFlight = new ConcurrentHashMap<>();
    private final AtomicLong nextCookie = new AtomicLong(1);
    private final ReentrantLock sendLock = new ReentrantLock();
    private final ByteBuffer sendHeader = ByteBuffer.allocateDirect(Nbd.REQUEST_SIZE);
    private final ByteBuffer replyHeader = ByteBuffer.allocateDirect(Nbd.STRUCTURED_REPLY_SIZE);
    private final ByteBuffer scratch = ByteBuffer.allocateDirect(64 * 1024);
    private final Thread reader;
    /** True on reader threads, whose completion callbacks may submit more requests. */
    private static final ThreadLocal<Boolean> IN_READER = ThreadLocal.withInitial(() -> false);
    /** Set once, when the connection dies; every later submission fails with it. */
    private volatile NbdException failure;

    Connection(SocketChannel channel, String peer, Handshake.Result handshake, ScheduledExecutorService timer,
               ClientOptions options, int index) {
        this.channel = channel;
        this.peer = peer;
        this.info = handshake.info();
        this.baseAllocationId = handshake.baseAllocationId();
        this.timer = timer;
        this.requestTimeoutNanos = options.requestTimeout().toNanos();
        this.window = new Semaphore(options.requestsInFlight());
        this.reader = Thread.ofPlatform().daemon().name("jnbd-reader-" + peer + "#" + index).unstarted(this::readLoop);
        reader.start();
    }

    ExportInfo info() {
        return info;
    }

    int inFlight() {
        return inFlight.size();
    }

    boolean alive() {
        return failure == null;
    }

    /**
     * Sends one request. {@code data} is the destination of a READ (filled between its position and limit,
     * which are left unchanged) or the payload of a WRITE; null otherwise.
     */
    CompletableFuture<Object> submit(int type, int flags, long offset, long length, ByteBuffer data) {
        Pending p = new Pending(type, flags, offset, length, data, nextCookie.getAndIncrement());
        NbdException dead = failure;
        if (dead != null) {
            p.future.completeExceptionally(dead);
            return p.future;
        }
        long deadline = requestTimeoutNanos > 0 ? System.nanoTime() + requestTimeoutNanos : 0;
        try {
            boolean got;
            if (IN_READER.get()) {
                // A completion callback running on a reader thread must not wait for a slot: the slot it waits
                // for may only be freed by that very thread. It goes over the window instead.
                p.holdsSlot = window.tryAcquire();
                got = true;
            } else {
                got = requestTimeoutNanos > 0 ? window.tryAcquire(requestTimeoutNanos, TimeUnit.NANOSECONDS) : acquire();
            }
            if (!got) {
                p.future.completeExceptionally(new NbdTimeoutException("no free request slot on " + peer + " within the request timeout for " + p.describe()));
                return p.future;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            p.future.completeExceptionally(new NbdException("interrupted while waiting to send " + p.describe(), e));
            return p.future;
        }
        inFlight.put(p.cookie, p);
        if (failure != null) {
            // Lost the race with a connection failure that already swept the map.
            finish(p, failure);
            return p.future;
        }
        if (deadline != 0) {
            long left = Math.max(1, deadline - System.nanoTime());
            p.timeout = timer.schedule(() -> timeOut(p), left, TimeUnit.NANOSECONDS);
        }
        sendLock.lock();
        try {
            sendHeader.clear();
            new Request(flags, type, p.cookie, offset, length).encode(sendHeader);
            sendHeader.flip();
            if (type == Nbd.CMD_WRITE) {
                ByteBuffer payload = data.duplicate();
                ByteBuffer[] both = {sendHeader, payload};
                while (payload.hasRemaining()) channel.write(both);
            } else {
                while (sendHeader.hasRemaining()) channel.write(sendHeader);
            }
            p.sent = true;
        } catch (IOException e) {
            fail(new NbdConnectionException("connection to " + peer + " failed while sending " + p.describe() + ": " + e.getMessage(), e));
        } finally {
            sendLock.unlock();
        }
        return p.future;
    }

    private boolean acquire() throws InterruptedException {
        window.acquire();
        return true;
    }

    private void timeOut(Pending p) {
        NbdTimeoutException e = new NbdTimeoutException(p.describe() + " to " + peer + " got no reply within "
            + TimeUnit.NANOSECONDS.toMillis(requestTimeoutNanos) + " ms");
        if (!p.sent) {
            // Still stuck in the socket write: the server has stopped reading. Only closing the channel frees
            // the sending thread (and whoever waits for the send lock).
            fail(new NbdConnectionException("connection to " + peer + " closed: the server stopped reading requests ("
                + e.getMessage() + ")", e));
            return;
        }
        // The reply may still come: the entry stays so that the reader can drain it, but the caller is
        // released now, or as soon as the reader has finished placing the chunk it is in the middle of.
        switch (p.settle(e)) {
            case NOW -> deliver(p, e);
            case HELD -> p.timeout = timer.schedule(() -> stalledMidReply(p), requestTimeoutNanos, TimeUnit.NANOSECONDS);
            case ALREADY -> { }
        }
    }

    /** A reply that stops in the middle of its data would hold the caller past its timeout for ever. */
    private void stalledMidReply(Pending p) {
        if (p.heldSettled()) {
            fail(new NbdConnectionException("connection to " + peer + " closed: the reply to " + p.describe()
                + " stalled in the middle of its data", null));
        }
    }

    /** Sends DISC after the requests in flight have been answered (or {@code graceMillis} passed), then closes. */
    void close(long graceMillis) {
        long until = System.currentTimeMillis() + graceMillis;
        // Requests already timed out are not waited for: their caller has been told, the server may be stuck.
        while (failure == null && System.currentTimeMillis() < until
               && inFlight.values().stream().anyMatch(p -> !p.settled())) {
            try {
                Thread.sleep(5);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
        if (failure == null) {
            sendLock.lock();
            try {
                ByteBuffer disc = ByteBuffer.allocate(Nbd.REQUEST_SIZE);
                new Request(0, Nbd.CMD_DISC, 0, 0, 0).encode(disc);
                disc.flip();
                while (disc.hasRemaining()) channel.write(disc);
            } catch (IOException ignored) {
                // Closing anyway.
            } finally {
                sendLock.unlock();
            }
        }
        fail(new NbdConnectionException("connection to " + peer + " was closed by the client", null));
        try {
            reader.join(1000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Closes the connection and fails every request in flight with {@code cause}. Idempotent. */
    private void fail(NbdException cause) {
        synchronized (this) {
            if (failure != null) return;
            failure = cause;
        }
        try {
            channel.close();
        } catch (IOException ignored) {
            // Nothing more to do with a broken channel.
        }
        // A request whose data the reader is placing gets the failure from the reader, once its read has
        // failed on the closed channel.
        for (Pending p : inFlight.values()) finish(p, cause);
    }

    /** Removes the request and releases its slot exactly once, then delivers the outcome unless one was already. */
    private void finish(Pending p, Object outcome) {
        if (inFlight.remove(p.cookie) == null) return;
        if (p.holdsSlot) window.release();
        ScheduledFuture<?> t = p.timeout;
        if (t != null) t.cancel(false);
        if (p.settle(outcome) == Pending.Settled.NOW) deliver(p, outcome);
    }

    private static void deliver(Pending p, Object outcome) {
        if (outcome instanceof Throwable t) {
            p.future.completeExceptionally(t);
        } else {
            p.future.complete(outcome);
        }
    }

    // ---- receive side: only the reader thread runs below ----

    private void readLoop() {
        IN_READER.set(true);
        try {
            while (true) readReply();
        } catch (ProtocolException e) {
            fail(new NbdProtocolException("protocol violation by " + peer + ": " + e.getMessage() + "; connection closed"));
        } catch (EOFException e) {
            fail(new NbdConnectionException("connection to " + peer + " lost: server closed it"
                + (inFlight.isEmpty() ? "" : " with " + inFlight.size() + " request(s) in flight"), e));
        } catch (IOException e) {
            fail(new NbdConnectionException("connection to " + peer + " lost: " + e.getMessage(), e));
        } catch (RuntimeException e) {
            fail(new NbdConnectionException("client bug while reading from " + peer + ": " + e, e));
        }
    }

    private void readReply() throws IOException, ProtocolException {
        replyHeader.clear().limit(Nbd.SIMPLE_REPLY_SIZE);
        readFully(replyHeader);
        replyHeader.flip();
        int magic = replyHeader.getInt();
        if (magic == Nbd.SIMPLE_REPLY_MAGIC) {
            simpleReply(SimpleReply.decodeAfterMagic(replyHeader));
        } else if (magic == Nbd.STRUCTURED_REPLY_MAGIC && info.structuredReplies()) {
            replyHeader.limit(Nbd.STRUCTURED_REPLY_SIZE).position(Nbd.SIMPLE_REPLY_SIZE);
            readFully(replyHeader);
            replyHeader.position(4);
            chunk(StructuredReplyHeader.decodeAfterMagic(replyHeader));
        } else {
            throw new ProtocolException("bad reply magic 0x" + Integer.toHexString(magic));
        }
    }

    private Pending lookup(long cookie) throws ProtocolException {
        Pending p = inFlight.get(cookie);
        if (p == null) throw new ProtocolException("reply with unknown cookie " + Long.toUnsignedString(cookie));
        return p;
    }

    private void simpleReply(SimpleReply reply) throws IOException, ProtocolException {
        Pending p = lookup(reply.cookie());
        if (reply.error() != 0) {
            finish(p, p.serverError(reply.error(), ""));
            return;
        }
        if (p.type == Nbd.CMD_READ) {
            // Structured servers must not do this for READ, but the data's length is known from the request,
            // so it still decodes unambiguously.
            receiveInto(p, 0, (int) p.length);
            p.cover(0, p.length);
        } else if (p.type == Nbd.CMD_BLOCK_STATUS) {
            throw new ProtocolException("simple reply without error to " + p.describe());
        }
        finish(p, null);
    }

    private void chunk(StructuredReplyHeader h) throws IOException, ProtocolException {
        Pending p = lookup(h.cookie());
        long length = h.length();
        switch (h.type()) {
            case Nbd.REPLY_TYPE_NONE -> {
                if (length != 0) throw new ProtocolException("NONE chunk with payload for " + p.describe());
                if (!h.done()) throw new ProtocolException("NONE chunk without DONE for " + p.describe());
            }
            case Nbd.REPLY_TYPE_OFFSET_DATA -> {
                if (p.type != Nbd.CMD_READ) throw new ProtocolException("OFFSET_DATA chunk for " + p.describe());
                if (length < 9) throw new ProtocolException("OFFSET_DATA chunk of " + length + " bytes");
                long offset = readPayload(8).getLong();
                long dataLength = length - 8;
                long at = p.placeChunk(offset, dataLength);
                receiveInto(p, at, (int) dataLength);
            }
            case Nbd.REPLY_TYPE_OFFSET_HOLE -> {
                if (p.type != Nbd.CMD_READ) throw new ProtocolException("OFFSET_HOLE chunk for " + p.describe());
                if (length != 12) throw new ProtocolException("OFFSET_HOLE chunk of " + length + " bytes");
                ByteBuffer b = readPayload(12);
                long offset = b.getLong();
                long holeLength = Integer.toUnsignedLong(b.getInt());
                if (holeLength == 0) throw new ProtocolException("OFFSET_HOLE of length 0 for " + p.describe());
                long at = p.placeChunk(offset, holeLength);
                if (p.claim()) {
                    zeroFill(p.data, p.data.position() + (int) at, (int) holeLength);
                    letGo(p);
                }
            }
            case Nbd.REPLY_TYPE_BLOCK_STATUS -> {
                if (p.type != Nbd.CMD_BLOCK_STATUS) throw new ProtocolException("BLOCK_STATUS chunk for " + p.describe());
                if (length > MAX_BLOCK_STATUS_CHUNK) throw new ProtocolException("BLOCK_STATUS chunk of " + length + " bytes");
                ByteBuffer payload = ByteBuffer.allocate((int) length);
                readFully(payload);
                var status = Chunks.decodeBlockStatus(payload.flip());
                if (status.contextId() == baseAllocationId) p.addExtents(status.descriptors());
            }
            default -> {
                if (!h.isError()) {
                    throw new ProtocolException("unexpected chunk type " + h.type() + " for " + p.describe());
                }
                if (length < 6 || length > MAX_ERROR_CHUNK) {
                    throw new ProtocolException("error chunk of " + length + " bytes for " + p.describe());
                }
                ByteBuffer payload = ByteBuffer.allocate((int) length);
                readFully(payload);
                payload.flip();
                if (h.type() == Nbd.REPLY_TYPE_ERROR || h.type() == Nbd.REPLY_TYPE_ERROR_OFFSET) {
                    var e = Chunks.decodeError(h.type(), payload);
                    if (e.error() == 0) throw new ProtocolException("error chunk with error 0 for " + p.describe());
                    String where = e.offset() >= 0 ? " at offset " + Long.toUnsignedString(e.offset()) : "";
                    p.recordError(e.error(), e.message() + where);
                } else {
                    // The spec: an unknown error type still fails the request, transmission may go on.
                    int error = payload.getInt();
                    p.recordError(error == 0 ? Nbd.EIO : error, "error chunk of unknown type " + h.type());
                }
            }
        }
        if (h.done()) finish(p, p.outcome());
    }

    private ByteBuffer readPayload(int n) throws IOException {
        scratch.clear().limit(n);
        readFully(scratch);
        return scratch.flip();
    }

    /** Reads {@code n} bytes of block data into the request's buffer at {@code at}, or discards them if settled. */
    private void receiveInto(Pending p, long at, int n) throws IOException {
        if (!p.claim()) {
            int left = n;
            while (left > 0) {
                scratch.clear().limit(Math.min(left, scratch.capacity()));
                readFully(scratch);
                left -= scratch.limit();
            }
            return;
        }
        try {
            int start = p.data.position() + (int) at;
            readFully(p.data.slice(start, n));
        } finally {
            letGo(p);
        }
    }

    /** Ends a claim, delivering the outcome that was decided while the reader held the buffer. */
    private static void letGo(Pending p) {
        Object outcome = p.release();
        if (outcome != Pending.OPEN) deliver(p, outcome);
    }

    private static void zeroFill(ByteBuffer buf, int from, int n) {
        java.lang.foreign.MemorySegment.ofBuffer(buf.slice(from, n)).fill((byte) 0);
    }

    private void readFully(ByteBuffer buf) throws IOException {
        while (buf.hasRemaining()) {
            if (channel.read(buf) < 0) throw new EOFException();
        }
    }
}
