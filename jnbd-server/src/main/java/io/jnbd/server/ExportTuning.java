package io.jnbd.server;

/**
 * Per-export data-path settings.
 *
 * @param splitThreshold reads longer than this (in direct/buffered mode, with structured replies) are split
 * @param chunkSize      the size of each chunk of a split read
 * @param streams        how many chunks of one read are read from the backend at once
 * @param scheduler      how each batch of requests that arrived together becomes disk operations
 */
public record ExportTuning(int splitThreshold, int chunkSize, int streams, BatchScheduler.Policy scheduler) {
    // 512K chunks, 2 at a time. With 1M x 4 a 4 MiB read has all its chunks on the disk at once, they finish
    // together and none of the sending overlaps the disk (bench/overlap, 22 Nov: 512K x 4 was 1.2-1.4x
    // faster in every round). Since buffers sit on huge pages a disk read of 512K is quick enough that two
    // at a time keep the disk busy, and on two vCPUs the other two only compete with the sending: 512K x 2
    // beat 512K x 4 in 8 of 12 bench/overlap rounds and in 21 of 27 pairs of 2-8 MiB reads at QD 1-4.
    // A machine with more cores or a deeper device may want more: sweep with STREAMS=2,4,8 bench/overlap.
    public static final ExportTuning DEFAULT = new ExportTuning(1 << 20, 512 << 10, 2, BatchScheduler.Policy.NONE);

    // A read from memory waits on no device: each chunk is a copy, so a stream more is a CPU more. A 4 MiB
    // read of a memory export at QD1 ran 7-25% faster with 4 streams than with 2 (6 rounds, 22 Nov).
    static final int MEMORY_STREAMS = 4;

    /** The defaults for a backend with these traits: one that never blocks (memory) reads with more streams. */
    public static ExportTuning defaultsFor(java.util.Set<io.jnbd.server.backend.Backend.Trait> traits) {
        return traits.contains(io.jnbd.server.backend.Backend.Trait.NEVER_BLOCKS) ? DEFAULT.withStreams(MEMORY_STREAMS) : DEFAULT;
    }

    public ExportTuning withStreams(int n) {
        return new ExportTuning(splitThreshold, chunkSize, n, scheduler);
    }

    public ExportTuning {
        if (chunkSize < 4096 || Integer.bitCount(chunkSize) != 1) throw new IllegalArgumentException("chunk size must be a power of two of at least 4K");
        if (streams < 1 || streams > 64) throw new IllegalArgumentException("streams must be 1 to 64");
        if (splitThreshold < chunkSize) throw new IllegalArgumentException("split threshold must be at least the chunk size");
    }
}
