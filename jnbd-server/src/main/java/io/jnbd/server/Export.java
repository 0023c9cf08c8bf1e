package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Backend.Capability;

/** A named, opened export: the backend every connection to it shares, what it advertises, and who may use it. */
public record Export(String name, String description, Backend backend, ExportTuning tuning, AllowList access) {

    public Export(String name, String description, Backend backend) {
        this(name, description, backend, ExportTuning.defaultsFor(backend.traits()));
    }

    /** Open to every client. */
    public Export(String name, String description, Backend backend, ExportTuning tuning) {
        this(name, description, backend, tuning, AllowList.ANYONE);
    }

    /** Largest run of adjacent requests the sorted scheduler merges into one disk operation. */
    private static final long MAX_MERGE = 8L << 20;
    private static final BatchScheduler NONE = new BatchScheduler(BatchScheduler.Policy.NONE, MAX_MERGE);
    private static final BatchScheduler SORTED = new BatchScheduler(BatchScheduler.Policy.SORTED, MAX_MERGE);

    /** The scheduler for this export's batches; stateless, so one instance per policy serves every batch. */
    public BatchScheduler scheduler() {
        return tuning.scheduler() == BatchScheduler.Policy.SORTED ? SORTED : NONE;
    }

    /** Transmission flags derived from the backend's capabilities; the edge enforces the same set. */
    public int transmissionFlags(boolean structuredReplies) {
        int f = Nbd.FLAG_HAS_FLAGS;
        if (!backend.can(Capability.WRITE)) f |= Nbd.FLAG_READ_ONLY;
        if (backend.can(Capability.FLUSH)) f |= Nbd.FLAG_SEND_FLUSH;
        if (backend.can(Capability.FUA)) f |= Nbd.FLAG_SEND_FUA;
        if (backend.can(Capability.TRIM)) f |= Nbd.FLAG_SEND_TRIM;
        if (backend.can(Capability.ZERO)) f |= Nbd.FLAG_SEND_WRITE_ZEROES;
        if (backend.can(Capability.ZERO) && backend.can(Capability.FAST_ZERO)) f |= Nbd.FLAG_SEND_FAST_ZERO;
        if (backend.can(Capability.CACHE)) f |= Nbd.FLAG_SEND_CACHE;
        if (backend.can(Capability.MULTI_CONN)) f |= Nbd.FLAG_CAN_MULTI_CONN;
        if (structuredReplies) f |= Nbd.FLAG_SEND_DF;
        return f;
    }

    /**
     * The size in which a write's payload goes to the disk as it arrives, or 0 to write it whole: only direct
     * writes longer than the split threshold (cached ones measured no better: the page cache takes a chunk
     * about as fast as the socket delivers it), and only on the preferred block boundaries, so that no two
     * chunks share a block: an unaligned chunk would be a read-modify-write, serialised with its neighbour's
     * (correct, but slower than writing the request whole).
     */
    int writeChunkSize(io.jnbd.protocol.Request r) {
        int block = backend.blockSizes().preferred();
        if (!backend.has(Backend.Trait.DIRECT_IO) || r.length() <= tuning.splitThreshold()
                || r.offset() % block != 0 || tuning.chunkSize() % block != 0) return 0;
        return tuning.chunkSize();
    }

    /**
     * A read or write longer than the export's maximum payload, which only a client that did not agree block
     * sizes may send (RequestValidator): no buffer holds it, so it is streamed in pieces of {@link #STREAM_PIECE},
     * at most {@link #STREAM_HELD} of them in memory at once (see SplitRead and SplitWrite).
     */
    boolean streamed(io.jnbd.protocol.Request r) {
        return (r.type() == Nbd.CMD_READ || r.type() == Nbd.CMD_WRITE) && r.length() > backend.blockSizes().maximum();
    }

    static final int STREAM_PIECE = 4 << 20;
    static final int STREAM_HELD = 4;
    /** What a streamed request holds of its connection's buffer share. */
    static final long STREAM_BYTES = (long) STREAM_PIECE * STREAM_HELD;

    /**
     * How a read is cut into pieces sent as they are read (see SplitRead), or null to read it whole: a read too
     * long for one buffer always; otherwise, a read longer than the split threshold, with structured replies.
     */
    ReadPlan readPlan(io.jnbd.protocol.Request r, boolean structured) {
        boolean ordered = !structured || r.has(Nbd.CMD_FLAG_DF);
        if (streamed(r)) return new ReadPlan(r.offset(), r.length(), STREAM_PIECE, tuning.streams(), STREAM_HELD, ordered);
        if (ordered || r.length() <= tuning.splitThreshold()) return null;
        return new ReadPlan(r.offset(), r.length(), tuning.chunkSize(), tuning.streams(), Integer.MAX_VALUE, false);
    }
}
