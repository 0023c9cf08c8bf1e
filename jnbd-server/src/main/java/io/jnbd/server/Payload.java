package io.jnbd.server;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.io.BufferPool;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * A write payload as {@link Intake} received it: one pool buffer per piece, in order, released together once
 * the write is done.
 */
final class Payload {
    private final List<BufferPool.Lease> pieces = new ArrayList<>(1);

    void add(BufferPool.Lease piece) {
        pieces.add(piece);
    }

    /** Writes the whole payload at {@code offset}: one buffer, or one vectored write of the pieces. */
    void writeTo(Backend backend, long offset, boolean fua) throws IOException {
        if (pieces.size() == 1) {
            backend.write(offset, pieces.getFirst().buffer(), fua);
        } else {
            List<ByteBuffer> bufs = new ArrayList<>(pieces.size());
            addBuffersTo(bufs);
            backend.write(offset, bufs.toArray(ByteBuffer[]::new), fua);
        }
    }

    /** Adds the pieces' buffers to {@code out}, for a write merged with its neighbours'. */
    void addBuffersTo(List<ByteBuffer> out) {
        for (BufferPool.Lease p : pieces) out.add(p.buffer());
    }

    void release() {
        for (BufferPool.Lease p : pieces) p.release();
        pieces.clear();
    }
}
