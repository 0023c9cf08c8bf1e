package io.jnbd.server.filter;

import static io.jnbd.server.filter.CacheBlocks.ABSENT;
import static io.jnbd.server.filter.CacheBlocks.CLEAN;
import static io.jnbd.server.filter.CacheBlocks.DIRTY;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BlockSizes;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.FilterBackend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.ReentrantLock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * nbdkit's cache filter: blocks of the backend kept in a local file ({@link CacheFile}), their states in
 * {@link CacheBlocks}. Every call locks the stripes of the blocks it touches for as long as it works on them, the
 * backend's calls included, so a block's state, its bytes in the file and the backend's agree whenever a stripe is
 * free; requests over different blocks run side by side.
 *
 * <ul>
 *   <li>A read takes stored blocks from the file and the rest from the backend, keeping them when cache-on-read is on.
 *   <li>A write (writeback, unsafe) goes into the file and leaves its blocks dirty; a block written in part is first
 *       read whole from the backend. With FUA in writeback, and always in writethrough, the write goes to the backend
 *       first and the file keeps a copy of what it stores.
 *   <li>Zero goes to the backend at once (it carries no data, so holding it back saves nothing, and the backend keeps
 *       its holes and fast zero); blocks it covers whole are dropped, stored blocks it covers in part are zeroed in
 *       the file too.
 *   <li>Trim drops the blocks it covers whole and passes them down; the part of a stored block it covers in part is
 *       left as it is (trim is advisory): what the cache holds stays what a read returns.
 *   <li>Flush writes every dirty block back, then flushes the backend; unsafe ignores it.
 * </ul>
 */
final class CacheFilter extends FilterBackend {
    private static final Logger log = LoggerFactory.getLogger(CacheFilter.class);
    /** Blocks an NBD_CMD_CACHE fills under one hold of their stripes: a hint of a terabyte must not lock out the rest. */
    private static final int FILL_CHUNK = 256;
    /** Bytes of adjacent dirty blocks a flush writes back in one call (but always at least a block). */
    private static final int WRITE_BACK_RUN = 1 << 20;

    private final CacheConfig config;
    private final long size;
    private final int blockSize;
    private final int shift;
    private final CacheBlocks blocks;
    private final CacheFile file;
    private final long maxBlocks, highBlocks, lowBlocks;
    private final boolean innerFua, innerFlush, innerWrite;
    private final Set<Capability> capabilities;
    private final Set<Trait> traits;
    private final ReentrantLock reclaiming = new ReentrantLock();
    /** Direct, never written: the source of the zeroes written over part of a stored block. */
    private final ByteBuffer zeroes;
    private final ConcurrentLinkedQueue<ByteBuffer> bounces = new ConcurrentLinkedQueue<>();
    /** Buffers of {@link #WRITE_BACK_RUN} bytes for flushes; one a flush at a time. */
    private final ConcurrentLinkedQueue<ByteBuffer> runBuffers = new ConcurrentLinkedQueue<>();
    private final LongAdder hits = new LongAdder(), misses = new LongAdder(), writtenBack = new LongAdder();
    private final AtomicBoolean closed = new AtomicBoolean();

    CacheFilter(Backend inner, CacheConfig config, Path dir) throws IOException {
        super(inner);
        this.config = config;
        this.size = inner.size();
        this.blockSize = config.blockSize();
        this.shift = Integer.numberOfTrailingZeros(blockSize);
        long count = (size + blockSize - 1) >>> shift;
        this.maxBlocks = config.maxSize() < 0 ? count : Math.min(count, config.maxSize() >>> shift);
        this.highBlocks = config.maxSize() < 0 ? count : Math.max(1, maxBlocks * config.high() / 100);
        this.lowBlocks = config.maxSize() < 0 ? count : maxBlocks * config.low() / 100;
        this.innerFua = inner.can(Capability.FUA);
        this.innerFlush = inner.can(Capability.FLUSH);
        this.innerWrite = inner.can(Capability.WRITE);
        this.capabilities = CacheFilterFactory.capabilities(config.mode(), inner.capabilities());
        this.traits = new CacheFilterFactory().traits(inner.traits());
        this.zeroes = ByteBuffer.allocateDirect(blockSize).asReadOnlyBuffer();
        this.blocks = new CacheBlocks(count);
        try {
            this.file = CacheFile.create(dir);
        } catch (IOException e) {
            blocks.close();
            throw e;
        }
    }

    @Override public Set<Capability> capabilities() { return capabilities; }
    @Override public Set<Trait> traits() { return traits; }

    /** The inner's, preferring whole cache blocks where the maximum allows, as nbdkit does. */
    @Override
    public BlockSizes blockSizes() {
        BlockSizes b = inner.blockSizes();
        if (b.maximum() < blockSize || b.preferred() >= blockSize) return b;
        return new BlockSizes(b.minimum(), blockSize, b.maximum());
    }

    @Override
    public String describe() {
        return config.describe() + " [" + CacheConfig.size(blocks.resident() << shift) + " cached, "
            + CacheConfig.size(blocks.dirty() << shift) + " dirty] -> " + inner.describe();
    }

    private long blockOf(long offset) { return offset >>> shift; }
    private long start(long b) { return b << shift; }
    private int length(long b) { return (int) Math.min(blockSize, size - start(b)); }

    /** Bytes [from, to) of a request at {@code offset} whose buffer starts at {@code base}. */
    private static ByteBuffer piece(ByteBuffer buf, int base, long offset, long from, long to) {
        return buf.slice(base + (int) (from - offset), (int) (to - from));
    }

    // ---- reads

    @Override
    public void read(long offset, ByteBuffer dst) throws IOException {
        int n = dst.remaining();
        if (n == 0) return;
        boolean keep = config.cacheOnRead();
        if (keep) makeRoom();
        int base = dst.position();
        long end = offset + n, first = blockOf(offset), last = blockOf(end - 1);
        blocks.lock(first, last);
        try {
            long pos = offset;
            while (pos < end) {
                // A run of blocks all stored, or all absent: one call for each run.
                long b = blockOf(pos);
                boolean stored = blocks.state(b) != ABSENT;
                long next = b + 1;
                while (next <= last && (blocks.state(next) != ABSENT) == stored) next++;
                long runEnd = Math.min(end, start(next));
                ByteBuffer p = piece(dst, base, offset, pos, runEnd);
                if (stored) {
                    file.read(pos, p);
                    for (long k = b; k < next; k++) blocks.touch(k);
                    hits.add(next - b);
                } else {
                    misses.add(next - b);
                    if (keep) readAndKeep(pos, runEnd, p, first, last);
                    else inner.read(pos, p);
                }
                pos = runEnd;
            }
        } finally {
            blocks.unlock(first, last);
        }
        dst.position(base + n);
    }

    /** Reads absent blocks from the backend into {@code p} (bytes [from, to)) and stores those it can. */
    private void readAndKeep(long from, long to, ByteBuffer p, long first, long last) throws IOException {
        long pos = from;
        while (pos < to) {
            long b = blockOf(pos);
            long bEnd = start(b) + length(b);
            if (pos == start(b) && to >= bEnd) {
                // Whole blocks straight into the request's buffer, then copied into the file.
                long wholeEnd = to == size ? to : start(blockOf(to));
                inner.read(pos, piece(p, 0, from, pos, wholeEnd));
                for (long k = b; start(k) < wholeEnd; k++) {
                    if (!admit(first, last)) break;
                    try {
                        file.write(start(k), piece(p, 0, from, start(k), start(k) + length(k)));
                    } catch (IOException e) {
                        blocks.unreserve();
                        throw e;
                    }
                    blocks.insert(k, CLEAN);
                }
                pos = wholeEnd;
            } else {
                ByteBuffer bounce = bounce(b);
                try {
                    inner.read(start(b), bounce.duplicate());
                    long pieceEnd = Math.min(to, bEnd);
                    p.put((int) (pos - from), bounce, (int) (pos - start(b)), (int) (pieceEnd - pos));
                    if (admit(first, last)) {
                        try {
                            file.write(start(b), bounce);
                        } catch (IOException e) {
                            blocks.unreserve();
                            throw e;
                        }
                        blocks.insert(b, CLEAN);
                    }
                    pos = pieceEnd;
                } finally {
                    release(bounce);
                }
            }
        }
    }

    @Override
    public CompletableFuture<Void> readAsync(long offset, ByteBuffer dst) {
        try {
            read(offset, dst);
            return CompletableFuture.completedFuture(null);
        } catch (IOException | RuntimeException e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    // ---- writes

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        int n = src.remaining();
        if (n == 0) return;
        boolean through = config.mode() == CacheConfig.Mode.WRITETHROUGH || (fua && config.mode() == CacheConfig.Mode.WRITEBACK);
        makeRoom();
        int base = src.position();
        long end = offset + n, first = blockOf(offset), last = blockOf(end - 1);
        blocks.lock(first, last);
        try {
            if (through) writeThrough(offset, end, src, base, fua, first, last);
            else writeBack(offset, end, src, base, first, last);
        } finally {
            blocks.unlock(first, last);
        }
        src.position(base + n);
    }

    /** Into the file, leaving the blocks dirty; a block that finds no place goes to the backend instead. */
    private void writeBack(long offset, long end, ByteBuffer src, int base, long first, long last) throws IOException {
        long runStart = offset, pos = offset;
        boolean runCached = true;
        while (pos < end) {
            long b = blockOf(pos);
            long pieceEnd = Math.min(end, start(b) + length(b));
            boolean cached = place(b, pos, pieceEnd, first, last);
            if (cached != runCached && pos > runStart) {
                emit(offset, runStart, pos, src, base, runCached);
                runStart = pos;
            }
            runCached = cached;
            pos = pieceEnd;
        }
        emit(offset, runStart, end, src, base, runCached);
    }

    private void emit(long offset, long from, long to, ByteBuffer src, int base, boolean cached) throws IOException {
        ByteBuffer p = piece(src, base, offset, from, to);
        if (cached) file.write(from, p);
        else inner.write(from, p, false);
    }

    /**
     * Makes block {@code b} stored and dirty before bytes [from, to) of it are written into the file, reading it whole
     * from the backend first if the write covers only part of it; false if it finds no place.
     */
    private boolean place(long b, long from, long to, long first, long last) throws IOException {
        int state = blocks.state(b);
        if (state != ABSENT) {
            blocks.mark(b, DIRTY);
            blocks.touch(b);
            return true;
        }
        if (!admit(first, last)) return false;
        if (from != start(b) || to != start(b) + length(b)) {
            try {
                fill(b);
            } catch (IOException e) {
                blocks.unreserve();
                throw e;
            }
        }
        blocks.insert(b, DIRTY);
        return true;
    }

    /** To the backend first; then the file keeps what the backend now has, for the blocks it stores or can take whole. */
    private void writeThrough(long offset, long end, ByteBuffer src, int base, boolean fua, long first, long last) throws IOException {
        inner.write(offset, piece(src, base, offset, offset, end), fua && innerFua);
        if (fua && !innerFua && innerFlush) inner.flush();
        for (long b = first; b <= last; b++) {
            long from = Math.max(offset, start(b)), to = Math.min(end, start(b) + length(b));
            int state = blocks.state(b);
            if (state == ABSENT) {
                if (from != start(b) || to != start(b) + length(b) || !admit(first, last)) continue;
                try {
                    file.write(from, piece(src, base, offset, from, to));
                } catch (IOException e) {
                    blocks.unreserve();
                    throw e;
                }
                blocks.insert(b, CLEAN);
            } else {
                try {
                    file.write(from, piece(src, base, offset, from, to));
                    blocks.touch(b);
                } catch (IOException e) {
                    // A clean block that missed the write would read old bytes: drop it, the backend has them.
                    if (state == CLEAN) evict(b);
                    throw e;
                }
            }
        }
    }

    @Override
    public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        long pos = offset;
        for (ByteBuffer b : srcs) {
            int n = b.remaining();
            write(pos, b, fua);
            pos += n;
        }
    }

    @Override
    public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
        try {
            write(offset, srcs, fua);
            return CompletableFuture.completedFuture(null);
        } catch (IOException | RuntimeException e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    /** FUA as the backend takes it: unsafe ignores it; a backend without FUA gets a flush after the call instead. */
    private boolean fuaDown(boolean fua) {
        return fua && config.mode() != CacheConfig.Mode.UNSAFE && innerFua;
    }

    private void afterFua(boolean fua) throws IOException {
        if (fua && config.mode() != CacheConfig.Mode.UNSAFE && !innerFua && innerFlush) inner.flush();
    }

    // ---- zero, trim

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        if (length == 0) return;
        long end = offset + length, first = blockOf(offset), last = blockOf(end - 1);
        blocks.lock(first, last);
        try {
            inner.zero(offset, length, mayTrim, fast, fuaDown(fua));
            afterFua(fua);
            for (long b = first; b <= last; b++) {
                if (blocks.state(b) == ABSENT) continue;
                long from = Math.max(offset, start(b)), to = Math.min(end, start(b) + length(b));
                if (from == start(b) && to == start(b) + length(b)) {
                    evict(b);
                } else {
                    file.write(from, zeroes.slice(0, (int) (to - from)));
                    blocks.touch(b);
                }
            }
        } finally {
            blocks.unlock(first, last);
        }
    }

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        if (length == 0) return;
        long end = offset + length, first = blockOf(offset), last = blockOf(end - 1);
        blocks.lock(first, last);
        try {
            // What a stored block holds is what its reads return: the part of one the trim covers stays.
            long from = offset, to = end;
            if (from != start(first) && blocks.state(first) != ABSENT) from = Math.min(to, start(first) + blockSize);
            if (to != start(last) + length(last) && blocks.state(last) != ABSENT) to = Math.max(from, start(last));
            if (to > from) inner.trim(from, to - from, fuaDown(fua));
            afterFua(fua);
            for (long b = blockOf(from); b <= last && start(b) + length(b) <= to; b++) {
                if (start(b) >= from && blocks.state(b) != ABSENT) evict(b);
            }
        } finally {
            blocks.unlock(first, last);
        }
    }

    // ---- flush, cache, extents

    @Override
    public void flush() throws IOException {
        if (config.mode() == CacheConfig.Mode.UNSAFE) return;
        writeBackAll();
        if (innerFlush) inner.flush();
    }

    /**
     * Writes every dirty block back, adjacent ones together (up to {@link #WRITE_BACK_RUN} bytes a call: one round trip
     * where the backend is remote, not one a block); goes on past a failure, as nbdkit does, and throws the first.
     */
    private void writeBackAll() throws IOException {
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

    /** Fills the cache with the blocks of the range, whatever cache-on-read says (nbdkit's NBD_CMD_CACHE). */
    @Override
    public void cache(long offset, long length) throws IOException {
        if (length == 0) return;
        makeRoom();
        long last = blockOf(offset + length - 1);
        for (long first = blockOf(offset); first <= last; first += FILL_CHUNK) {
            long chunkLast = Math.min(last, first + FILL_CHUNK - 1);
            blocks.lock(first, chunkLast);
            try {
                for (long b = first; b <= chunkLast; b++) {
                    if (blocks.state(b) != ABSENT) {
                        blocks.touch(b);
                        continue;
                    }
                    if (!admit(first, chunkLast)) return; // full of what is in use: the rest stays a hint
                    try {
                        fill(b);
                    } catch (IOException e) {
                        blocks.unreserve();
                        throw e;
                    }
                    blocks.insert(b, CLEAN);
                }
            } finally {
                blocks.unlock(first, chunkLast);
            }
        }
    }

    /** The backend's block status, with dirty blocks as data: the backend may still have a hole where they are. */
    @Override
    public List<Extent> extents(long offset, long length) throws IOException {
        List<Extent> below = inner.extents(offset, length);
        if (blocks.dirty() == 0) return below;
        List<Extent> out = new ArrayList<>();
        long pos = offset;
        for (Extent e : below) {
            long end = pos + e.length();
            if (!e.hole() && !e.zero()) {
                add(out, e.length(), e);
            } else {
                long at = pos;
                while (at < end) {
                    long d = blocks.nextDirty(blockOf(at), blockOf(end - 1) + 1);
                    long dirtyFrom = d < 0 ? end : Math.max(at, start(d));
                    if (dirtyFrom >= end) {
                        add(out, end - at, e);
                        break;
                    }
                    if (dirtyFrom > at) add(out, dirtyFrom - at, e);
                    long dirtyTo = Math.min(end, start(d) + blockSize);
                    add(out, dirtyTo - dirtyFrom, null);
                    at = dirtyTo;
                }
            }
            pos = end;
        }
        return out;
    }

    /** Appends {@code length} bytes with {@code like}'s flags (data if null), merged into the last extent if equal. */
    private static void add(List<Extent> out, long length, Extent like) {
        boolean hole = like != null && like.hole(), zero = like != null && like.zero();
        if (!out.isEmpty() && out.getLast().hole() == hole && out.getLast().zero() == zero) {
            out.set(out.size() - 1, new Extent(out.getLast().length() + length, hole, zero));
        } else {
            out.add(new Extent(length, hole, zero));
        }
    }

    // ---- places: admission and reclaim

    /**
     * Takes a place for one more block, evicting a clean block outside [first, last] that has not been used for a lap
     * if the cache is full; false if none can be had now. The caller holds the stripes of [first, last], so it takes
     * others only if they are free.
     */
    private boolean admit(long first, long last) {
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
    private void makeRoom() {
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
    private void evict(long b) throws IOException {
        blocks.remove(b);
        file.discard(start(b), blockSize);
    }

    /** Reads block {@code b} whole from the backend into the file; the caller holds its stripe and its place. */
    private void fill(long b) throws IOException {
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
    private ByteBuffer bounce(long b) {
        ByteBuffer buf = bounces.poll();
        if (buf == null) buf = ByteBuffer.allocateDirect(blockSize);
        return buf.clear().limit(length(b));
    }

    private void release(ByteBuffer buf) {
        if (bounces.size() < 16) bounces.offer(buf);
    }

    /** Blocks the cache holds now; for tests. */
    long residentBlocks() {
        return blocks.resident();
    }

    long dirtyBlocks() {
        return blocks.dirty();
    }

    /** Bytes its file holds, or -1 where that cannot be asked; for tests. */
    long fileBytes() throws IOException {
        return file.dataBytes();
    }

    /** Writes dirty blocks back (in every mode, unsafe too: a clean stop loses nothing acknowledged), then closes. */
    @Override
    public void close() throws IOException {
        if (!closed.compareAndSet(false, true)) return;
        IOException failure = null;
        try {
            if (innerWrite) {
                writeBackAll();
                if (innerFlush) inner.flush();
            }
        } catch (IOException e) {
            failure = e;
        }
        log.info("cache of {}: {} blocks read from the cache, {} from the backend, {} written back; {} dirty left",
            inner.describe(), hits.sum(), misses.sum(), writtenBack.sum(), blocks.dirty());
        try {
            file.close();
        } catch (IOException e) {
            if (failure == null) failure = e;
        }
        blocks.close();
        try {
            inner.close();
        } catch (IOException e) {
            if (failure == null) failure = e;
        }
        if (failure != null) throw failure;
    }
}
