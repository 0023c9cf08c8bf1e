package io.jnbd.client;

import io.jnbd.protocol.BlockStatusDescriptor;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.ProtocolException;
import io.jnbd.protocol.Request;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;

/**
 * One request on a connection, from submission until its outcome is delivered, and what its reply chunks
 * have said so far.
 *
 * <p>Whether the caller's buffer may still be touched is decided under this object's monitor. The sender
 * holds a WRITE's buffer while it copies the payload into the socket; the reader thread {@link #claim claims}
 * a READ before it places data. Each {@link #release lets go} when done, and an outcome decided in between
 * (a timeout, a lost connection, a reply that beat the sender) is held back and handed to the holder as it
 * lets go. So the future never completes while a byte may still move between the buffer and the socket,
 * and once the outcome is decided nothing takes hold of the buffer again: a request still queued then is
 * never sent. Delivering an outcome, whoever does it, completes the future only once that thread holds no lock
 * of the client (see {@link Deliveries}); this object's monitor is never held while a future completes.
 */
final class Pending {

    /** Returned by {@link #release} when the request is still open. */
    static final Object OPEN = new Object();

    /** What {@link #settle} did with an outcome. */
    enum Settled {
        /** The outcome is this caller's to deliver now. */
        NOW,
        /** As NOW, and the request had not been sent: it never will be. */
        UNSENT,
        /** The sender or the reader holds the buffer: it delivers the outcome when it lets go. */
        HELD,
        /** Another outcome was decided first; this one is dropped. */
        ALREADY
    }

    private static final int QUEUED = 0;
    /** The sender is copying a WRITE's payload out of the buffer. */
    private static final int SENDING = 1;
    private static final int IN_FLIGHT = 2;
    /** The reader is placing reply data into the buffer. */
    private static final int PLACING = 3;
    /** SENDING or PLACING, and the outcome is decided: the holder delivers it when it lets go. */
    private static final int HELD_SETTLED = 4;
    private static final int SETTLED = 5;

    final int type;
    final int flags;
    final long offset;
    final long length;
    final ByteBuffer data;
    /** A WRITE's payload when it comes from a file rather than {@link #data}: sent by the kernel (sendfile). */
    final FileRegion file;
    /** Where a READ's data goes chunk by chunk instead of into {@link #data}; null for a buffered read. */
    final ReadSink sink;
    final long cookie;
    final CompletableFuture<Object> future = new CompletableFuture<>();
    /** The whole request (and payload) is in the socket. */
    volatile boolean sent;
    /** When the request times out, by System.nanoTime(); meaningless without a request timeout. */
    long deadline;
    /** The timeout has been dealt with. Only the timer thread touches this and {@link #stallDeadline}. */
    boolean timedOut;
    /** When a holder that still has the buffer after the timeout is taken to be stuck; 0 if none. */
    long stallDeadline;

    private int state = QUEUED;
    private Object heldOutcome;

    /** Parts of a read covered by content or error chunks so far: start to end, relative to the request. */
    private TreeMap<Long, Long> covered;
    private long coveredBytes;
    private int error;
    private String errorMessage;
    /** A block status reply's extents so far, by metadata context name. */
    private Map<String, List<MetaExtent>> extents;
    /** A failure of this side's (a read sink's), which fails the request whatever the server said. */
    private Throwable localFailure;

    Pending(int type, int flags, long offset, long length, ByteBuffer data, FileRegion file, long cookie) {
        this(type, flags, offset, length, data, file, null, cookie);
    }

    Pending(int type, int flags, long offset, long length, ByteBuffer data, FileRegion file, ReadSink sink, long cookie) {
        this.type = type;
        this.flags = flags;
        this.offset = offset;
        this.length = length;
        this.data = data;
        this.file = file;
        this.sink = sink;
        this.cookie = cookie;
    }

    /** Bytes of a file, from {@code position}: the payload of a WRITE that never enters this process. */
    record FileRegion(java.nio.channels.FileChannel channel, long position) {
    }

    boolean hasPayload() {
        return type == Nbd.CMD_WRITE;
    }

    /** Bytes the request puts into the socket. */
    long wireBytes() {
        return Nbd.REQUEST_SIZE + (hasPayload() ? length : 0);
    }

    // ---- who may touch the buffer, and who delivers the outcome ----

    /**
     * Takes the request out of the queue for sending (a WRITE's buffer is then held until {@link #release});
     * false if its outcome was decided while it waited, in which case it must not be sent.
     */
    synchronized boolean startSending() {
        if (state != QUEUED) return false;
        state = hasPayload() ? SENDING : IN_FLIGHT;
        return true;
    }

    /** Takes the buffer for placing data; false once the outcome is decided (the data is then discarded). */
    synchronized boolean claim() {
        if (state != IN_FLIGHT) return false;
        state = PLACING;
        return true;
    }

    /**
     * Gives the buffer back after sending or placing: {@link #OPEN}, or the outcome decided meanwhile, which
     * the caller must deliver.
     */
    synchronized Object release() {
        if (state == SENDING || state == PLACING) {
            state = IN_FLIGHT;
            return OPEN;
        }
        state = SETTLED;
        Object outcome = heldOutcome;
        heldOutcome = null;
        return outcome;
    }

    /** Decides the outcome (a Throwable for failure, else the result) unless one was decided already. */
    synchronized Settled settle(Object outcome) {
        switch (state) {
            case QUEUED -> {
                state = SETTLED;
                return Settled.UNSENT;
            }
            case IN_FLIGHT -> {
                state = SETTLED;
                return Settled.NOW;
            }
            case SENDING, PLACING -> {
                state = HELD_SETTLED;
                heldOutcome = outcome;
                return Settled.HELD;
            }
            default -> {
                return Settled.ALREADY;
            }
        }
    }

    /** The outcome is decided (it may still wait for the holder to let go of the buffer). */
    synchronized boolean settled() {
        return state >= HELD_SETTLED;
    }

    /** The outcome is decided but the sender or reader has held the buffer ever since. */
    synchronized boolean heldSettled() {
        return state == HELD_SETTLED;
    }

    // ---- the reply, as the reader thread assembles it ----

    String describe() {
        return new Request(flags, type, cookie, offset, length).toString();
    }

    NbdErrorException serverError(int error, String message) {
        return new NbdErrorException(error, describe(), message);
    }

    /** Checks a content chunk against the request and earlier chunks; returns its position in the buffer. */
    long placeChunk(long chunkOffset, long chunkLength) throws ProtocolException {
        long rel = chunkOffset - offset;
        if (Long.compareUnsigned(chunkOffset, offset) < 0 || Long.compareUnsigned(rel, length) > 0
            || chunkLength > length - rel) {
            throw new ProtocolException("chunk [" + Long.toUnsignedString(chunkOffset) + ", +" + chunkLength
                + ") lies outside " + describe());
        }
        cover(rel, chunkLength);
        return rel;
    }

    void cover(long rel, long n) throws ProtocolException {
        if (covered == null) covered = new TreeMap<>();
        var below = covered.floorEntry(rel);
        var above = covered.ceilingEntry(rel);
        if ((below != null && below.getValue() > rel) || (above != null && above.getKey() < rel + n)) {
            throw new ProtocolException("chunk at offset " + Long.toUnsignedString(offset + rel)
                + " overlaps an earlier chunk of " + describe());
        }
        covered.put(rel, rel + n);
        coveredBytes += n;
    }

    void recordError(int error, String message) {
        if (this.error == 0) {
            this.error = error;
            this.errorMessage = message;
        }
    }

    void recordLocalFailure(Throwable t) {
        if (localFailure == null) localFailure = t;
    }

    /** A BLOCK_STATUS chunk's descriptors for {@code context}, placed after the ones it had, clipped to the request. */
    void addExtents(String context, List<BlockStatusDescriptor> descriptors) {
        if (extents == null) extents = new HashMap<>();
        List<MetaExtent> list = extents.computeIfAbsent(context, c -> new ArrayList<>(descriptors.size()));
        long at = list.isEmpty() ? offset : list.getLast().end();
        long end = offset + length;
        for (var d : descriptors) {
            if (at >= end) break;
            long n = Math.min(d.length(), end - at);
            list.add(new MetaExtent(at, n, d.flags()));
            at += n;
        }
    }

    /**
     * How the reply ended: the exception to fail the request with, else its result: null but for block status,
     * whose result is the extents of each context that sent a chunk, by context name.
     */
    Object outcome() throws ProtocolException {
        if (localFailure != null) return localFailure;
        if (error != 0) return serverError(error, errorMessage);
        if (type == Nbd.CMD_READ && coveredBytes != length) {
            throw new ProtocolException("reply to " + describe() + " ended after covering " + coveredBytes
                + " of " + length + " bytes");
        }
        if (type == Nbd.CMD_BLOCK_STATUS && extents == null) {
            throw new ProtocolException("reply to " + describe() + " has no BLOCK_STATUS chunk");
        }
        return type == Nbd.CMD_BLOCK_STATUS ? Map.copyOf(extents) : null;
    }
}
