package io.jnbd.client;

import io.jnbd.protocol.BlockStatusDescriptor;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.ProtocolException;
import io.jnbd.protocol.Request;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;

/**
 * One request on a connection, from submission until its outcome is delivered, and what its reply chunks
 * have said so far.
 *
 * <p>Whether the caller's buffer may still be touched is decided under this object's monitor. The reader
 * thread {@link #claim claims} the request before it places data and {@link #release releases} it after;
 * an outcome decided in between (a timeout, a lost connection) is held back and handed to the reader as it
 * lets go. So the future never completes while a byte may still be on its way into the buffer, and once
 * the outcome is decided no claim succeeds any more.
 */
final class Pending {

    /** Returned by {@link #release} when the request is still open. */
    static final Object OPEN = new Object();

    /** What {@link #settle} did with an outcome. */
    enum Settled {
        /** The outcome is this caller's to deliver now. */
        NOW,
        /** The reader holds the buffer: it delivers the outcome when it lets go. */
        HELD,
        /** Another outcome was decided first; this one is dropped. */
        ALREADY
    }

    private static final int IN_FLIGHT = 0;
    private static final int PLACING = 1;
    /** Placing, and the outcome is decided: the reader delivers it when it lets go. */
    private static final int PLACING_SETTLED = 2;
    private static final int SETTLED = 3;

    final int type;
    final int flags;
    final long offset;
    final long length;
    final ByteBuffer data;
    final long cookie;
    final CompletableFuture<Object> future = new CompletableFuture<>();
    /** The whole request (and payload) is in the socket. */
    volatile boolean sent;
    volatile ScheduledFuture<?> timeout;
    /** False when a reader-thread callback submitted it over the full window. */
    boolean holdsSlot = true;

    private int state = IN_FLIGHT;
    private Object heldOutcome;

    /** Parts of a read covered by content or error chunks so far: start to end, relative to the request. */
    private TreeMap<Long, Long> covered;
    private long coveredBytes;
    private int error;
    private String errorMessage;
    private List<Extent> extents;

    Pending(int type, int flags, long offset, long length, ByteBuffer data, long cookie) {
        this.type = type;
        this.flags = flags;
        this.offset = offset;
        this.length = length;
        this.data = data;
        this.cookie = cookie;
    }

    // ---- who may touch the buffer, and who delivers the outcome ----

    /** Takes the buffer for placing data; false once the outcome is decided (the data is then discarded). */
    synchronized boolean claim() {
        if (state != IN_FLIGHT) return false;
        state = PLACING;
        return true;
    }

    /** Gives the buffer back: {@link #OPEN}, or the outcome decided meanwhile, which the caller must deliver. */
    synchronized Object release() {
        if (state == PLACING) {
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
            case IN_FLIGHT -> {
                state = SETTLED;
                return Settled.NOW;
            }
            case PLACING -> {
                state = PLACING_SETTLED;
                heldOutcome = outcome;
                return Settled.HELD;
            }
            default -> {
                return Settled.ALREADY;
            }
        }
    }

    /** The outcome is decided (it may still wait for the reader to let go of the buffer). */
    synchronized boolean settled() {
        return state >= PLACING_SETTLED;
    }

    /** The outcome is decided but the reader has held the buffer ever since. */
    synchronized boolean heldSettled() {
        return state == PLACING_SETTLED;
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

    void addExtents(List<BlockStatusDescriptor> descriptors) {
        if (extents == null) extents = new ArrayList<>(descriptors.size());
        long at = offset + extents.stream().mapToLong(Extent::length).sum();
        long end = offset + length;
        for (var d : descriptors) {
            if (at >= end) break;
            long n = Math.min(d.length(), end - at);
            extents.add(new Extent(at, n, d.flags()));
            at += n;
        }
    }

    /** How the reply ended: the exception to fail the request with, else its result (null but for block status). */
    Object outcome() throws ProtocolException {
        if (error != 0) return serverError(error, errorMessage);
        if (type == Nbd.CMD_READ && coveredBytes != length) {
            throw new ProtocolException("reply to " + describe() + " ended after covering " + coveredBytes
                + " of " + length + " bytes");
        }
        if (type == Nbd.CMD_BLOCK_STATUS && (extents == null || extents.isEmpty())) {
            throw new ProtocolException("reply to " + describe() + " has no base:allocation extents");
        }
        return type == Nbd.CMD_BLOCK_STATUS ? List.copyOf(extents) : null;
    }
}
