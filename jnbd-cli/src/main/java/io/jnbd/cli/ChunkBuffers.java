package io.jnbd.cli;

import java.nio.ByteBuffer;
import java.util.concurrent.ConcurrentLinkedQueue;

/**
 * The copy's chunk buffers, made only when a chunk has to pass through this process. Most chunks never do: a
 * local file goes to a server by sendfile and data between two servers by splice, each after a look at its
 * first 4 KiB. Making every buffer up front touched requests × connections MiB (128 MiB by default) before
 * the first byte moved, and on a VM that returns freed memory to its host each fresh page is slow to touch.
 *
 * <p>No bound here: the copy holds at most one buffer per chunk in flight, and chunks in flight are bounded.
 */
final class ChunkBuffers {
    /** How much of a chunk is looked at to decide whether it must pass through a buffer. */
    static final int PROBE = 4096;

    private final int chunk;
    private final ConcurrentLinkedQueue<ByteBuffer> free = new ConcurrentLinkedQueue<>();
    private final ThreadLocal<ByteBuffer> probes = ThreadLocal.withInitial(() -> ByteBuffer.allocateDirect(PROBE));

    ChunkBuffers(int chunk) {
        this.chunk = chunk;
    }

    /** A buffer of one chunk's size, cleared. */
    private ByteBuffer take() {
        ByteBuffer b = free.poll();
        return b != null ? b.clear() : ByteBuffer.allocateDirect(chunk);
    }

    /** This thread's buffer of {@link #PROBE} bytes, cleared. */
    ByteBuffer probe() {
        return probes.get().clear();
    }

    /** One chunk's claim on a buffer, taken the first time it is asked for. */
    final class Lease {
        private ByteBuffer buffer;

        synchronized ByteBuffer get() {
            if (buffer == null) buffer = take();
            return buffer;
        }

        synchronized void release() {
            if (buffer != null) free.add(buffer);
            buffer = null;
        }
    }

    Lease lease() {
        return new Lease();
    }
}
