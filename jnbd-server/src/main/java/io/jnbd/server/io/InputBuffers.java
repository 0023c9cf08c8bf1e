package io.jnbd.server.io;

import java.nio.ByteBuffer;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The buffers connections receive request headers and small payloads into, lent only while a connection has
 * something to read: an idle connection, or one waiting for the rest of a header, holds none. Ten thousand
 * idle clients then cost no receive memory at all, and the few that are busy at any moment reuse a handful of
 * buffers that stay warm in the CPU's cache.
 */
public final class InputBuffers {
    private final int size;
    private final int keep;
    private final ConcurrentLinkedDeque<ByteBuffer> free = new ConcurrentLinkedDeque<>();
    private final AtomicInteger kept = new AtomicInteger();
    private final AtomicInteger lent = new AtomicInteger();

    /** Buffers of {@code size} bytes; at most {@code keep} are kept for reuse, more are left to the collector. */
    public InputBuffers(int size, int keep) {
        this.size = size;
        this.keep = keep;
    }

    /** A cleared buffer of this pool's size. */
    public ByteBuffer take() {
        lent.incrementAndGet();
        ByteBuffer b = free.pollFirst();
        if (b == null) return ByteBuffer.allocateDirect(size);
        kept.decrementAndGet();
        return b.clear();
    }

    public void give(ByteBuffer b) {
        lent.decrementAndGet();
        if (kept.incrementAndGet() <= keep) {
            free.offerFirst(b);
        } else {
            kept.decrementAndGet(); // enough in reserve: the collector frees this one
        }
    }

    /** Buffers taken and not given back: the connections busy receiving right now. */
    public int inUse() {
        return lent.get();
    }
}
