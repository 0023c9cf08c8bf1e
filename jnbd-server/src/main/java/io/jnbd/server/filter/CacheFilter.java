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
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * nbdkit's cache filter: what each request does with the blocks a {@link CacheStore} holds (in a local file, their
 * states in {@link CacheBlocks}). Every call locks the stripes of the blocks it touches for as long as it works on them, the
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

    private final CacheConfig config;
    private final long size;
    private final int blockSize;
    private final CacheStore store;
    private final CacheBlocks blocks;
    private final CacheFile file;
    private final boolean innerFua, innerFlush, innerWrite;
    private final Set<Capability> capabilities;
    private final Set<Trait> traits;
    /** Direct, never written: the source of the zeroes written over part of a stored block. */
    private final ByteBuffer zeroes;
    private final AtomicBoolean closed = new AtomicBoolean();

    CacheFilter(Backend inner, CacheConfig config, Path dir) throws IOException {
        super(inner);
        this.config = config;
        this.size = inner.size();
        this.blockSize = config.blockSize();
        this.innerFua = inner.can(Capability.FUA);
        this.innerFlush = inner.can(Capability.FLUSH);
        this.innerWrite = inner.can(Capability.WRITE);
        this.capabilities = CacheFilterFactory.capabilities(config.mode(), inner.capabilities());
        this.traits = new CacheFilterFactory().traits(inner.traits());
        this.zeroes = ByteBuffer.allocateDirect(blockSize).asReadOnlyBuffer();
        this.store = new CacheStore(inner, config, dir);
        this.blocks = store.blocks;
        this.file = store.file;
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
        return config.describe() + " [" + CacheConfig.size(blocks.resident() * blockSize) + " cached, "
            + CacheConfig.size(blocks.dirty() * blockSize) + " dirty] -> " + inner.describe();
    }

    private long blockOf(long offset) { return blocks.blockOf(offset); }
    private long start(long b) { return blocks.start(b); }
    private int length(long b) { return blocks.length(b); }

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
        if (keep) store.makeRoom();
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
                    store.hits.add(next - b);
                } else {
                    store.misses.add(next - b);
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
                    if (!store.admit(first, last)) break;
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
                ByteBuffer bounce = store.bounce(b);
                try {
                    inner.read(start(b), bounce.duplicate());
                    long pieceEnd = Math.min(to, bEnd);
                    p.put((int) (pos - from), bounce, (int) (pos - start(b)), (int) (pieceEnd - pos));
                    if (store.admit(first, last)) {
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
                    store.release(bounce);
                }
            }
        }
    }

    // ---- writes

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        int n = src.remaining();
        if (n == 0) return;
        boolean through = config.mode() == CacheConfig.Mode.WRITETHROUGH || (fua && config.mode() == CacheConfig.Mode.WRITEBACK);
        store.makeRoom();
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
        if (!store.admit(first, last)) return false;
        if (from != start(b) || to != start(b) + length(b)) {
            try {
                store.fill(b);
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
                if (from != start(b) || to != start(b) + length(b) || !store.admit(first, last)) continue;
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
                    if (state == CLEAN) store.evict(b);
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
                    store.evict(b);
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
                if (start(b) >= from && blocks.state(b) != ABSENT) store.evict(b);
            }
        } finally {
            blocks.unlock(first, last);
        }
    }

    // ---- flush, cache, extents

    @Override
    public void flush() throws IOException {
        if (config.mode() == CacheConfig.Mode.UNSAFE) return;
        store.writeBackAll();
        if (innerFlush) inner.flush();
    }

    /** Fills the cache with the blocks of the range, whatever cache-on-read says (nbdkit's NBD_CMD_CACHE). */
    @Override
    public void cache(long offset, long length) throws IOException {
        if (length == 0) return;
        store.makeRoom();
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
                    if (!store.admit(first, chunkLast)) return; // full of what is in use: the rest stays a hint
                    try {
                        store.fill(b);
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
                store.writeBackAll();
                if (innerFlush) inner.flush();
            }
        } catch (IOException e) {
            failure = e;
        }
        log.info("cache of {}: {}", inner.describe(), store.stats());
        try {
            store.close();
        } catch (IOException e) {
            if (failure == null) failure = e;
        }
        try {
            inner.close();
        } catch (IOException e) {
            if (failure == null) failure = e;
        }
        if (failure != null) throw failure;
    }
}
