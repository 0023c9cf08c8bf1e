package io.jnbd.server;

import io.jnbd.protocol.BlockStatusDescriptor;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.MetaExtent;
import io.jnbd.server.backend.NbdErrorException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * The answer to {@code NBD_CMD_BLOCK_STATUS}: the backend is asked for each metadata context the session selected,
 * and each answer is cut to what the request may get. A context that fails (a bitmap removed since the client
 * selected it) answers with its error in place of its chunk; the others still answer, and the connection goes on.
 */
final class BlockStatus {
    /** A descriptor's length is 32 bits; this keeps a cut one 4 KiB-aligned. */
    private static final long MAX_DESCRIPTOR = 0xFFFF_F000L;
    /** The spec's bound on descriptors in one chunk; a client asks again from where a shorter answer ends. */
    private static final int MAX_DESCRIPTORS = 1 << 20;

    private BlockStatus() {}

    /** One context's part of the answer: its descriptors, or (descriptors null) the failure in their place. */
    record Answer(MetaContext context, List<BlockStatusDescriptor> descriptors, Replies.Failure failure) {}

    /** The answer of each of {@code contexts} to {@code r}, in their order. */
    static List<Answer> of(Backend backend, List<MetaContext> contexts, Request r, Replies replies) {
        List<Answer> out = new ArrayList<>(contexts.size());
        for (MetaContext c : contexts) {
            try {
                out.add(new Answer(c, c.baseAllocation() ? allocation(backend, r) : meta(backend, c.name(), r), null));
            } catch (IOException | RuntimeException e) {
                out.add(new Answer(c, null, replies.failure(r, e)));
            }
        }
        return out;
    }

    private static List<BlockStatusDescriptor> allocation(Backend backend, Request r) throws IOException {
        Cut cut = new Cut(r);
        for (Extent e : backend.extents(r.offset(), r.length())) {
            if (e.length() > 0 && !cut.add(e.length(), e.flags())) break;
        }
        // Status 0 (data, not known to be zero) is always true of base:allocation, so it stands in for no answer.
        if (cut.descriptors.isEmpty()) cut.add(r.length(), 0);
        return cut.descriptors;
    }

    private static List<BlockStatusDescriptor> meta(Backend backend, String context, Request r) throws IOException {
        Cut cut = new Cut(r);
        for (MetaExtent e : backend.metaExtents(context, r.offset(), r.length())) {
            if (!cut.add(e.length(), e.flags())) break;
        }
        // Unlike base:allocation, 0 may claim something false here (a clean block in a dirty bitmap): fail instead.
        if (cut.descriptors.isEmpty()) throw new NbdErrorException(Nbd.EIO, context + " gave no status at " + r.offset());
        return cut.descriptors;
    }

    /** A context's extents as descriptors: within the request's length, and only one under REQ_ONE. */
    private static final class Cut {
        final List<BlockStatusDescriptor> descriptors = new ArrayList<>();
        private final boolean one;
        private long left;

        Cut(Request r) {
            this.left = r.length();
            this.one = r.has(Nbd.CMD_FLAG_REQ_ONE);
        }

        /** Adds an extent; false once no more may follow. */
        boolean add(long length, int flags) {
            long len = Math.min(Math.min(length, left), MAX_DESCRIPTOR);
            descriptors.add(new BlockStatusDescriptor(len, flags));
            left -= len;
            return left > 0 && !one && descriptors.size() < MAX_DESCRIPTORS;
        }
    }
}
