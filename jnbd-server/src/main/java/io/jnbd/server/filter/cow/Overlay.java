package io.jnbd.server.filter.cow;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.io.NativeIo;
import io.jnbd.server.io.PageCacheSource;
import java.io.Closeable;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One overlay: the changes made over a read-only base, block by block. Each block is {@link #ABSENT} (read from the
 * base), {@link #DATA} (read from the overlay's data file, at the same offset as in the export) or {@link #ZERO}
 * (reads as zeroes, whatever the base holds). The data file is sparse: only blocks written take space.
 *
 * <p>Changes to a block hold its stripe lock: a write smaller than a block first copies the rest of the block from the
 * base (or zeroes), and two writers doing that at once would each put back what the other wrote. Reads take no lock:
 * one racing a write to the same bytes may see part of it, which NBD allows; a read-only view's reads, which its
 * writer cannot order against, take the locks ({@link #readSteady}).
 *
 * <p>Durability ({@link #flush}): the blocks changed since the last flush are taken from the dirty set, their states
 * read, the data file made durable, and only then their records appended to the map and made durable; so no record
 * ever finds data that a crash could lose. A temporary overlay (one connection's) has no map and nothing to make
 * durable: it goes with the connection.
 */
final class Overlay implements Closeable {
    static final byte ABSENT = 0, DATA = 1, ZERO = 2;
    private static final VarHandle STATE = MethodHandles.arrayElementVarHandle(byte[].class);
    private static final int STRIPES = 256;

    final String name;
    private final Path dir;
    private final OverlayMap.Header header;
    private final FileChannel data;
    /** A descriptor of the data file for punching holes, or -1 without native calls. */
    private final int fd;
    /** The data file's reads that need no wait, through {@link #fd}. */
    private final PageCacheSource cached;
    private final OverlayMap map;
    private final int blockSize, shift;
    private final long size;
    private final byte[] states;
    /** The state of each block as the map on disk has it (only {@link #flush} touches it, under {@link #flushing}). */
    private final byte[] recorded;
    private final Set<Integer> dirty = ConcurrentHashMap.newKeySet();
    private final ReentrantLock[] stripes = new ReentrantLock[STRIPES];
    private final ReentrantLock flushing = new ReentrantLock();
    private final ArrayBlockingQueue<ByteBuffer> blockBuffers = new ArrayBlockingQueue<>(64);
    private final ByteBuffer zeroes;
    private volatile boolean closed;

    private Overlay(String name, Path dir, OverlayMap.Header header, FileChannel data, int fd, PageCacheSource cached,
                    OverlayMap map, byte[] states) {
        this.name = name;
        this.dir = dir;
        this.header = header;
        this.data = data;
        this.fd = fd;
        this.cached = cached;
        this.map = map;
        this.blockSize = header.blockSize();
        this.shift = Integer.numberOfTrailingZeros(blockSize);
        this.size = header.size();
        this.states = states;
        this.recorded = states.clone();
        for (int i = 0; i < STRIPES; i++) stripes[i] = new ReentrantLock();
        this.zeroes = ByteBuffer.allocateDirect(blockSize).asReadOnlyBuffer();
    }

    static int blocks(long size, int blockSize) {
        long n = (size + blockSize - 1) / blockSize;
        if (n > Integer.MAX_VALUE - 8) throw new IllegalArgumentException("an export of " + size + " bytes has too many blocks of " + blockSize);
        return (int) n;
    }

    /**
     * The overlay kept in {@code dir} ({@code data} and {@code map}), made there if it does not exist yet; refused
     * when it was made over another base or is damaged.
     */
    static Overlay open(String name, Path dir, OverlayMap.Header header) throws IOException {
        Path mapFile = dir.resolve("map"), dataFile = dir.resolve("data");
        if (!Files.exists(mapFile)) {
            // The map is written last, whole: an overlay without one was never used, whatever its data file holds.
            Files.createDirectories(dir);
            try (FileChannel d = FileChannel.open(dataFile, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING,
                    StandardOpenOption.WRITE)) {
                d.truncate(0);
                if (header.size() > 0) d.write(ByteBuffer.allocate(1), header.size() - 1); // sparse, the export's length
                d.force(true);
            }
            OverlayMap.create(mapFile, header);
            OverlayMap.syncDirectory(dir.getParent());
        }
        byte[] states = new byte[blocks(header.size(), header.blockSize())];
        FileChannel data = FileChannel.open(dataFile, StandardOpenOption.READ, StandardOpenOption.WRITE);
        OverlayMap map = null;
        int fd = -1;
        try {
            map = OverlayMap.open(mapFile, header, states, name);
            if (data.size() != header.size()) {
                throw new IOException("overlay '" + name + "': its data file " + dataFile + " is " + data.size() + " bytes, not "
                    + header.size() + "; it is damaged, refusing it");
            }
            long live = 0;
            for (byte s : states) if (s != ABSENT) live++;
            if (map.records() > 2 * live + 65536) {
                // Every flush appends: compact a log mostly of overridden records once, as it is opened.
                map.close();
                map = null;
                OverlayMap.rewrite(mapFile, header, states);
                map = OverlayMap.open(mapFile, header, new byte[states.length], name);
            }
            fd = NativeIo.AVAILABLE ? NativeIo.open(dataFile, true).orElse(-1) : -1;
            return new Overlay(name, dir, header, data, fd, PageCacheSource.of(dataFile, data, fd), map, states);
        } catch (IOException | RuntimeException e) {
            data.close();
            if (map != null) map.close();
            throw e;
        }
    }

    /** An overlay for one connection under {@code parent}, its file unlinked at once: nothing of it outlives the process. */
    static Overlay temporary(String name, Path parent, OverlayMap.Header header) throws IOException {
        Files.createDirectories(parent);
        Path file = Files.createTempFile(parent, "connection-", ".data");
        FileChannel data = null;
        int fd = -1;
        try {
            data = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE);
            if (header.size() > 0) data.write(ByteBuffer.allocate(1), header.size() - 1);
            fd = NativeIo.AVAILABLE ? NativeIo.open(file, true).orElse(-1) : -1;
            return new Overlay(name, null, header, data, fd, PageCacheSource.of(file, data, fd), null,
                new byte[blocks(header.size(), header.blockSize())]);
        } catch (IOException | RuntimeException e) {
            if (data != null) data.close();
            if (fd >= 0) NativeIo.close(fd);
            throw e;
        } finally {
            Files.deleteIfExists(file);
        }
    }

    private byte state(int block) {
        return (byte) STATE.getAcquire(states, block);
    }

    private void setState(int block, byte s) {
        STATE.setRelease(states, block, s);
        dirty.add(block);
    }

    private long blockStart(int block) {
        return (long) block << shift;
    }

    /** The length of block {@code block}: the last may be short. */
    private int blockLength(int block) {
        return (int) Math.min(blockSize, size - blockStart(block));
    }

    /** Fills {@code dst} with the export's bytes at {@code offset}: runs of blocks in one state are read at once. */
    void read(long offset, ByteBuffer dst, Backend base) throws IOException {
        long pos = offset;
        while (dst.hasRemaining()) {
            int block = (int) (pos >>> shift);
            byte s = state(block);
            long runEnd = Math.min(blockStart(block + 1), size);
            for (int b = block + 1; runEnd < pos + dst.remaining() && state(b) == s; b++) runEnd = Math.min(blockStart(b + 1), size);
            int n = (int) Math.min(dst.remaining(), runEnd - pos);
            ByteBuffer part = dst.slice(dst.position(), n);
            switch (s) {
                case DATA -> readFully(part, pos);
                case ZERO -> MemorySegment.ofBuffer(part).fill((byte) 0);
                default -> base.read(pos, part);
            }
            dst.position(dst.position() + n);
            pos += n;
        }
    }

    /**
     * As {@link #read}, but only if no byte needs a wait: overlay blocks from the data file's page cache, the base's
     * from {@code base}'s ({@link Backend#readIfCached}). False as soon as one run is not held, {@code dst}'s position
     * unchanged. Takes no lock, as {@link #read} takes none.
     */
    boolean readIfCached(long offset, ByteBuffer dst, Backend base) throws IOException {
        long pos = offset;
        int at = dst.position();
        while (at < dst.limit()) {
            int block = (int) (pos >>> shift);
            byte s = state(block);
            long runEnd = Math.min(blockStart(block + 1), size);
            for (int b = block + 1; runEnd < pos + (dst.limit() - at) && state(b) == s; b++) runEnd = Math.min(blockStart(b + 1), size);
            int n = (int) Math.min(dst.limit() - at, runEnd - pos);
            ByteBuffer part = dst.slice(at, n);
            boolean held = switch (s) {
                case DATA -> cached.readIfCached(part, pos);
                case ZERO -> {
                    MemorySegment.ofBuffer(part).fill((byte) 0);
                    yield true;
                }
                default -> base.readIfCached(pos, part);
            };
            if (!held) return false;
            at += n;
            pos += n;
        }
        dst.position(at);
        return true;
    }

    /**
     * As {@link #read}, holding the stripe locks of every block of the range (in stripe order; a writer holds one at a
     * time, so they cannot deadlock): no block is seen half changed, and the whole range as it is between changes. For
     * a read-only view of the overlay while its client writes (a backup).
     */
    void readSteady(long offset, ByteBuffer dst, Backend base) throws IOException {
        if (!dst.hasRemaining()) return;
        long first = offset >>> shift, last = (offset + dst.remaining() - 1) >>> shift;
        boolean[] held = new boolean[STRIPES];
        if (last - first + 1 >= STRIPES) java.util.Arrays.fill(held, true);
        else for (long b = first; b <= last; b++) held[(int) (b & (STRIPES - 1))] = true;
        int locked = 0;
        try {
            for (; locked < STRIPES; locked++) if (held[locked]) stripes[locked].lock();
            read(offset, dst, base);
        } finally {
            for (int i = 0; i < locked; i++) if (held[i]) stripes[i].unlock();
        }
    }

    /** Writes {@code src} at {@code offset} into the overlay, block by block. */
    void write(long offset, ByteBuffer src, Backend base) throws IOException {
        long pos = offset;
        while (src.hasRemaining()) {
            int block = (int) (pos >>> shift);
            int within = (int) (pos - blockStart(block));
            int n = Math.min(src.remaining(), blockLength(block) - within);
            writeBlock(block, within, src.slice(src.position(), n), base);
            src.position(src.position() + n);
            pos += n;
        }
    }

    private void writeBlock(int block, int within, ByteBuffer part, Backend base) throws IOException {
        ReentrantLock lock = stripes[block & (STRIPES - 1)];
        lock.lock();
        try {
            byte s = state(block);
            int length = blockLength(block);
            if (s == DATA || part.remaining() == length) {
                writeFully(part, blockStart(block) + within);
            } else {
                ByteBuffer whole = borrow();
                try {
                    whole.clear().limit(length);
                    if (s == ABSENT) base.read(blockStart(block), whole);
                    else MemorySegment.ofBuffer(whole).fill((byte) 0);
                    whole.clear().limit(length);
                    whole.put(within, part, part.position(), part.remaining());
                    writeFully(whole, blockStart(block));
                } finally {
                    giveBack(whole);
                }
            }
            setState(block, DATA);
        } finally {
            lock.unlock();
        }
    }

    /**
     * Makes the range read as zeroes (a trim too: what it reads as is the client's to not care about, and zeroes never
     * fall through to the base): whole blocks by their state alone, their space given back; the ends of a range that
     * cover part of a block are written as zeroes.
     */
    void zero(long offset, long length, Backend base) throws IOException {
        long pos = offset, end = offset + length;
        while (pos < end) {
            int block = (int) (pos >>> shift);
            int within = (int) (pos - blockStart(block));
            int n = (int) Math.min(end - pos, blockLength(block) - within);
            if (n == blockLength(block)) zeroBlock(block);
            else writeBlock(block, within, zeroes.slice(0, n), base);
            pos += n;
        }
    }

    private void zeroBlock(int block) throws IOException {
        ReentrantLock lock = stripes[block & (STRIPES - 1)];
        lock.lock();
        try {
            byte was = state(block);
            setState(block, ZERO);
            // Under the lock: a write after this one must not have its data punched away.
            if (was == DATA && fd >= 0) {
                NativeIo.fallocate(fd, NativeIo.FALLOC_FL_PUNCH_HOLE | NativeIo.FALLOC_FL_KEEP_SIZE, blockStart(block), blockLength(block));
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * Allocation of the range: the overlay's data blocks as data, its zeroed blocks as holes reading as zeroes, and the
     * base's own status where the overlay holds nothing; may cover less than asked.
     */
    List<Extent> extents(long offset, long length, Backend base) throws IOException {
        List<Extent> out = new ArrayList<>();
        long pos = offset, end = offset + length;
        while (pos < end) {
            int block = (int) (pos >>> shift);
            byte s = state(block);
            long runEnd = Math.min(blockStart(block + 1), size);
            for (int b = block + 1; runEnd < end && state(b) == s; b++) runEnd = Math.min(blockStart(b + 1), size);
            long n = Math.min(end, runEnd) - pos;
            if (s == ABSENT) {
                long covered = 0;
                for (Extent e : base.extents(pos, n)) {
                    long l = Math.min(e.length(), n - covered);
                    add(out, new Extent(l, e.hole(), e.zero()));
                    covered += l;
                    if (covered == n) break;
                }
                if (covered < n) return out; // the base said less: so do we
            } else {
                add(out, new Extent(n, s == ZERO, s == ZERO));
            }
            pos += n;
        }
        return out;
    }

    private static void add(List<Extent> out, Extent e) {
        if (e.length() == 0) return;
        if (!out.isEmpty()) {
            Extent last = out.getLast();
            if (last.hole() == e.hole() && last.zero() == e.zero()) {
                out.set(out.size() - 1, new Extent(last.length() + e.length(), e.hole(), e.zero()));
                return;
            }
        }
        out.add(e);
    }

    /** Makes every change completed before the call durable, the map that finds it with it (see the class comment). */
    void flush() throws IOException {
        if (map == null) return;
        flushing.lock();
        try {
            int[] blocks = new int[Math.max(16, dirty.size())];
            byte[] taken = new byte[blocks.length];
            int n = 0;
            for (Iterator<Integer> it = dirty.iterator(); it.hasNext(); ) {
                int b = it.next();
                it.remove(); // before reading the state: a change after this puts the block back for the next flush
                if (n == blocks.length) {
                    blocks = java.util.Arrays.copyOf(blocks, n * 2);
                    taken = java.util.Arrays.copyOf(taken, n * 2);
                }
                blocks[n] = b;
                taken[n++] = state(b);
            }
            if (n == 0) return;
            // Only a block whose state the map does not have yet needs a record; every written one needs its data durable.
            int[] changed = new int[n];
            byte[] changedTo = new byte[n];
            int m = 0;
            for (int i = 0; i < n; i++) {
                if (taken[i] == recorded[blocks[i]]) continue;
                changed[m] = blocks[i];
                changedTo[m++] = taken[i];
            }
            try {
                data.force(false);
                if (m > 0) map.append(changed, changedTo, m);
            } catch (IOException | RuntimeException e) {
                for (int i = 0; i < n; i++) dirty.add(blocks[i]); // not recorded: the next flush tries again
                throw e;
            }
            for (int i = 0; i < m; i++) recorded[changed[i]] = changedTo[i];
        } finally {
            flushing.unlock();
        }
    }

    /** Bytes of blocks the overlay holds data for. */
    long dataBytes() {
        long n = 0;
        for (int b = 0; b < states.length; b++) if (state(b) == DATA) n += blockLength(b);
        return n;
    }

    Path dir() {
        return dir;
    }

    OverlayMap.Header header() {
        return header;
    }

    private void readFully(ByteBuffer dst, long at) throws IOException {
        long pos = at;
        while (dst.hasRemaining()) {
            int r = data.read(dst, pos);
            if (r < 0) throw new IOException("overlay '" + name + "': its data file ends before " + pos);
            pos += r;
        }
    }

    private void writeFully(ByteBuffer src, long at) throws IOException {
        long pos = at;
        while (src.hasRemaining()) pos += data.write(src, pos);
    }

    private ByteBuffer borrow() {
        ByteBuffer b = blockBuffers.poll();
        return b != null ? b : ByteBuffer.allocateDirect(blockSize);
    }

    private void giveBack(ByteBuffer b) {
        blockBuffers.offer(b); // dropped when 64 are kept already
    }

    @Override
    public void close() throws IOException {
        if (closed) return;
        closed = true;
        try {
            if (fd >= 0) NativeIo.close(fd);
            data.close();
        } finally {
            if (map != null) map.close();
        }
    }

    boolean isClosed() {
        return closed;
    }
}
