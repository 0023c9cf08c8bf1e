package io.jnbd.cli;

import java.nio.ByteBuffer;
import java.util.concurrent.ConcurrentLinkedQueue;

/**
 * The copy's chunk buffers, made only when a chunk has to pass through this process. Most chunks never do: a
 * local file goes to a server by sendfile and data between two servers by splice, each after a look at its
 * first 4 KiB. Making every buffer up front touched requests × connections MiB (128 MiB by default) before
 * the first byte moved, and on a VM that returns freed memory to its host each fresh page is slow to touch.
 *
 * <p>A buffer is as large as its chunk needs, rounded up to a power of two (64 KiB at least), and goes back to
 * the pool of its size: an incremental copy of scattered 64 KiB ranges took a 1 MiB buffer for each and touched
 * 128 MiB to move 41.
 *
 * <p>No bound here: the copy holds at most one buffer per chunk in flight, and chunks in flight are bounded.
 */
final class ChunkBuffers {
    /** How much of a chunk is looked at to decide whether it must pass through a buffer. */
    static final int PROBE = 4096;

    /** The smallest buffer made. */
    private static final int MIN = 64 * 1024;

    private final int chunk;
    /** Free buffers by capacity. */
    private final java.util.concurrent.ConcurrentHashMap<Integer, ConcurrentLinkedQueue<ByteBuffer>> free =
        new java.util.concurrent.ConcurrentHashMap<>();
    private final ThreadLocal<ByteBuffer> probes = ThreadLocal.withInitial(() -> ByteBuffer.allocateDirect(PROBE));

    ChunkBuffers(int chunk) {
        this.chunk = chunk;
    }

    /** A buffer of at least {@code n} bytes (at most a chunk's), cleared. */
    private ByteBuffer take(int n) {
        int size = (int) Math.min(chunk, Math.max(MIN, Long.highestOneBit(Math.max(1, n - 1)) << 1));
        ByteBuffer b = pool(size).poll();
        return b != null ? b.clear() : ByteBuffer.allocateDirect(size);
    }

    private ConcurrentLinkedQueue<ByteBuffer> pool(int size) {
        return free.computeIfAbsent(size, s -> new ConcurrentLinkedQueue<>());
    }

    /** This thread's buffer of {@link #PROBE} bytes, cleared. */
    ByteBuffer probe() {
        return probes.get().clear();
    }

    /** One chunk's claim on a buffer of its length, taken the first time it is asked for. */
    final class Lease {
        private final int length;
        private ByteBuffer buffer;

        private Lease(int length) {
            this.length = length;
        }

        synchronized ByteBuffer get() {
            if (buffer == null) buffer = take(length);
            return buffer;
        }

        synchronized void release() {
            if (buffer != null) pool(buffer.capacity()).add(buffer);
            buffer = null;
        }
    }

    /** A lease for a chunk of {@code length} bytes (at most a chunk). */
    Lease lease(int length) {
        return new Lease(length);
    }
}
