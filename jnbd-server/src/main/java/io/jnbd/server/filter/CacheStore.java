package io.jnbd.server.filter;

import static io.jnbd.server.filter.CacheBlocks.ABSENT;
import static io.jnbd.server.filter.CacheBlocks.CLEAN;
import static io.jnbd.server.filter.CacheBlocks.DIRTY;

import io.jnbd.server.backend.Backend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.ReentrantLock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What a cache holds and the moves between it and the backend, whatever the request: the block table, the file, the
 * places {@code cache-max-size} allows and their reclaim, filling a block from the backend and writing dirty blocks
 * back. {@link CacheFilter} decides what each request does with them.
 */
final class CacheStore implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(CacheStore.class);
    /** Bytes of adjacent dirty blocks a flush writes back in one call (but always at least a block). */
    private static final int WRITE_BACK_RUN = 1 << 20;

    final CacheBlocks blocks;
    final CacheFile file;
    private final Backend inner;
    private final int blockSize, shift;
    private final long maxBlocks, highBlocks, lowBlocks;
    private final ReentrantLock reclaiming = new ReentrantLock();
    private final ConcurrentLinkedQueue<ByteBuffer> bounces = new ConcurrentLinkedQueue<>();
    /** Buffers of {@link #WRITE_BACK_RUN} bytes for flushes; one a flush at a time. */
    private final ConcurrentLinkedQueue<ByteBuffer> runBuffers = new ConcurrentLinkedQueue<>();
    final LongAdder hits = new LongAdder(), misses = new LongAdder();
    private final LongAdder writtenBack = new LongAdder();

    CacheStore(Backend inner, CacheConfig config, Path dir) throws IOException {
        this.inner = inner;
        this.blockSize = config.blockSize();
        this.shift = Integer.numberOfTrailingZeros(blockSize);
        this.blocks = new CacheBlocks(inner.size(), blockSize);
        long count = blocks.count();
        this.maxBlocks = config.maxSize() < 0 ? count : Math.min(count, config.maxSize() >>> shift);
        this.highBlocks = config.maxSize() < 0 ? count : Math.max(1, maxBlocks * config.high() / 100);
        this.lowBlocks = config.maxSize() < 0 ? count : maxBlocks * config.low() / 100;
        try {
            this.file = CacheFile.create(dir);
        } catch (IOException e) {
            blocks.close();
            throw e;
        }
    }

    private long start(long b) { return blocks.start(b); }
    private int length(long b) { return blocks.length(b); }

    /**
     * Writes every dirty block back, adjacent ones together (up to {@link #WRITE_BACK_RUN} bytes a call: one round trip
     * where the backend is remote, not one a block); goes on past a failure, as nbdkit does, and throws the first.
     */
    void writeBackAll() throws IOException {
        // No scan of the table (a byte a block) when nothing is dirty: writethrough, and every flush after the first.
        if (blocks.dirty() == 0) return;
        IOException failure = null;
        long count = blocks.count(), most = Math.max(1, WRITE_BACK_RUN >>> shift);
        ByteBuffer buffer = null;
        try {
            for (long b = blocks.nextDirty(0, count); b >= 0; ) {
                long last = b;
                while (last + 1 < count && last + 1 - b < most && blocks.state(last + 1) == DIRTY) last++;
                blocks.lock(b, last);
                try {
                    // The states seen without the lock were a hint: write back the runs still dirty now.
                    for (long from = b; from <= last; from++) {
                        if (blocks.state(from) != DIRTY) continue;
                        long to = from;
                        while (to < last && blocks.state(to + 1) == DIRTY) to++;
                        if (buffer == null) buffer = runBuffers.poll();
                        if (buffer == null) buffer = ByteBuffer.allocateDirect((int) (most << shift));
                        try {
                            writeBackRun(from, to, buffer);
                        } catch (IOException e) {
                            log.error("cache: writing back blocks {}-{} (offset {}) failed: {}", from, to, start(from), e.toString());
                            if (failure == null) failure = e;
                        }
                        from = to;
                    }
                } finally {
                    blocks.unlock(b, last);
                }
                b = blocks.nextDirty(last + 1, count);
            }
        } finally {
            if (buffer != null) runBuffers.offer(buffer);
        }
        if (failure != null) throw failure;
    }

    /** Dirty blocks {@code from} to {@code to} to the backend in one call; the caller holds their stripes. */
    private void writeBackRun(long from, long to, ByteBuffer buffer) throws IOException {
        buffer.clear().limit((int) (start(to) + length(to) - start(from)));
        file.read(start(from), buffer.duplicate());
        inner.write(start(from), buffer, false);
        for (long b = from; b <= to; b++) blocks.mark(b, CLEAN);
        writtenBack.add(to - from + 1);
    }

    /** A dirty block to the backend; the caller holds its stripe. */
    private void writeBackBlock(long b) throws IOException {
        ByteBuffer bounce = bounce(b);
        try {
            file.read(start(b), bounce.duplicate());
            inner.write(start(b), bounce, false);
            blocks.mark(b, CLEAN);
            writtenBack.increment();
        } finally {
            release(bounce);
        }
    }

    /**
     * Takes a place for one more block, evicting a clean block outside [first, last] that has not been used for a lap
     * if the cache is full; false if none can be had now. The caller holds the stripes of [first, last], so it takes
     * others only if they are free.
     */
    boolean admit(long first, long last) {
        if (blocks.reserve(maxBlocks)) return true;
        long tries = 2 * blocks.resident() + 2;
        for (long i = 0; i < tries; i++) {
            long v = blocks.advanceHand();
            if (v < 0) return false;
            if (v >= first && v <= last) continue;
            if (!blocks.tryLock(v)) continue;
            try {
                if (blocks.state(v) != CLEAN) continue;
                if (blocks.referenced(v)) {
                    blocks.clearReference(v);
                    continue;
                }
                evict(v);
            } catch (IOException e) {
                log.warn("cache: reclaiming block {} failed: {}", v, e.toString());
                continue;
            } finally {
                blocks.unlock(v);
            }
            if (blocks.reserve(maxBlocks)) return true;
        }
        return false;
    }

    /**
     * Once the cache holds more than the high threshold of cache-max-size, brings it under the low one, as nbdkit
     * does: the clock hand clears reference bits, writes back dirty blocks it finds unused (they are evicted on its
     * next lap unless used meanwhile) and evicts unused clean ones. Called holding no stripe; one thread at a time.
     */
    void makeRoom() {
        if (blocks.resident() < highBlocks || maxBlocks >= blocks.count() || !reclaiming.tryLock()) return;
        try {
            long steps = 3 * blocks.resident() + 3;
            while (blocks.resident() > lowBlocks && steps-- > 0) {
                long v = blocks.advanceHand();
                if (v < 0) return;
                blocks.lock(v);
                try {
                    int state = blocks.state(v);
                    if (state == ABSENT) continue;
                    if (blocks.referenced(v)) blocks.clearReference(v);
                    else if (state == DIRTY) writeBackBlock(v);
                    else evict(v);
                } catch (IOException e) {
                    log.warn("cache: reclaiming block {} failed: {}", v, e.toString());
                } finally {
                    blocks.unlock(v);
                }
            }
        } finally {
            reclaiming.unlock();
        }
    }

    /** Drops a stored block, dirty or not; the caller holds its stripe. */
    void evict(long b) throws IOException {
        blocks.remove(b);
        file.discard(start(b), blockSize);
    }

    /** Reads block {@code b} whole from the backend into the file; the caller holds its stripe and its place. */
    void fill(long b) throws IOException {
        ByteBuffer bounce = bounce(b);
        try {
            inner.read(start(b), bounce.duplicate());
            file.write(start(b), bounce);
            misses.increment();
        } finally {
            release(bounce);
        }
    }

    /** A direct buffer the length of block {@code b}: block data never passes through the heap. */
    ByteBuffer bounce(long b) {
        ByteBuffer buf = bounces.poll();
        if (buf == null) buf = ByteBuffer.allocateDirect(blockSize);
        return buf.clear().limit(length(b));
    }

    void release(ByteBuffer buf) {
        if (bounces.size() < 16) bounces.offer(buf);
    }

    /** {@code 12 blocks read from the cache, 3 from the backend, 5 written back; 0 dirty left}, for the log. */
    String stats() {
        return hits.sum() + " blocks read from the cache, " + misses.sum() + " from the backend, " + writtenBack.sum()
            + " written back; " + blocks.dirty() + " dirty left";
    }

    @Override
    public void close() throws IOException {
        try {
            file.close();
        } finally {
            blocks.close();
        }
    }
}
