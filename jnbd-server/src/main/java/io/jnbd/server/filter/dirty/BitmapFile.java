package io.jnbd.server.filter.dirty;

import io.jnbd.server.backend.MetaExtent;
import java.io.Closeable;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.zip.CRC32C;

/**
 * One dirty bitmap and its file, mapped into memory so that a mark is a store into the page cache: a process killed
 * the instant after a mark loses nothing, and {@link #force} (on FLUSH and FUA) makes the marks durable against a power
 * cut. The file:
 *
 * <pre>
 * header, 4096 bytes:  "JNBDDBM1" | version (int, 1) | state (int) | granularity (long) | export size (long)
 *                      | created (long) | image identity (32 bytes) | CRC-32C of the bits (int) | bits CRC holds (int)
 *                      | image's modification time at a clean close (long, ns; -1: none)
 *                      | CRC-32C of the 88 bytes before it (int) | zeroes              (big-endian)
 * bits, from 4096:     one bit a block, block i in the little-endian long i / 64 at bit i % 64; padded to 4096
 * </pre>
 *
 * States: 0 pending (made by an add or rotate that has not taken effect: deleted at open), 1 recording, 2 frozen. The
 * bits only go from 0 to 1 while the bitmap serves (but {@link #clear}), so a crash cannot tear them into anything but
 * a state between two that were true, and an older page of bits loses only marks no FLUSH acknowledged. The bits' CRC
 * holds while nothing can change them (frozen, or closed cleanly) and is checked at open then; a recording bitmap closed
 * cleanly also notes when the image was last modified, so that a write made while no server tracked the image (another
 * program) is found at the next open.
 */
final class BitmapFile implements Closeable {
    static final int HEADER = 4096;
    /** Extents of one answer at most, as the file backend bounds its own: the reply stays small, the client asks on. */
    static final int MAX_EXTENTS = 65536;
    static final int PENDING = 0, RECORDING = 1, FROZEN = 2;
    private static final byte[] MAGIC = "JNBDDBM1".getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    static final int FIELDS = 88;
    private static final int VERSION = 1, IDENTITY = 32;
    private static final VarHandle WORD = ValueLayout.JAVA_LONG.withOrder(ByteOrder.LITTLE_ENDIAN).varHandle();

    /** What a bitmap was made for; a file made for anything else is not trusted. */
    record Shape(long granularity, long size, byte[] identity) {
        long blocks() {
            return (size + granularity - 1) / granularity;
        }

        /** Why a bitmap made for {@code this} cannot serve {@code wanted}, or null. */
        String mismatch(Shape wanted) {
            if (size != wanted.size) return "it was made for an export of " + size + " bytes, the export has " + wanted.size;
            if (granularity != wanted.granularity) return "its granularity is " + granularity + ", not " + wanted.granularity;
            if (!Arrays.equals(identity, wanted.identity)) return "it was made for another image (or the image was replaced)";
            return null;
        }
    }

    final String name;
    final Path file;
    final Shape shape;
    final long created;
    private final int shift;
    private final FileChannel channel;
    private final Arena arena;
    private final MemorySegment header, bits;
    private volatile int state;
    /** Bits turned 0 to 1 so far, and how many of them {@link #force} has made durable (under {@link #forcing}). */
    private final AtomicLong marked = new AtomicLong();
    private volatile long forced;
    private final Object forcing = new Object();

    private BitmapFile(String name, Path file, Shape shape, long created, int state, FileChannel channel) throws IOException {
        this.name = name;
        this.file = file;
        this.shape = shape;
        this.created = created;
        this.state = state;
        this.shift = Long.numberOfTrailingZeros(shape.granularity);
        this.channel = channel;
        this.arena = Arena.ofShared();
        try {
            MemorySegment all = channel.map(FileChannel.MapMode.READ_WRITE, 0, fileSize(shape), arena);
            this.header = all.asSlice(0, HEADER);
            this.bits = all.asSlice(HEADER, fileSize(shape) - HEADER);
        } catch (IOException | RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    static long fileSize(Shape s) {
        long words = (s.blocks() + 63) / 64;
        return HEADER + ((words * 8 + HEADER - 1) & -HEADER);
    }

    /**
     * Writes a new bitmap file whole (every byte written, so that no later mark meets a hole on a full disk) under a
     * temporary name and renames it to {@code file}, durably; then maps it. {@code dirty}: every block set.
     */
    static BitmapFile create(String name, Path file, Shape shape, long created, int state, boolean dirty) throws IOException {
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.READ,
                StandardOpenOption.WRITE)) {
            long bitBytes = fileSize(shape) - HEADER, blocks = shape.blocks();
            ByteBuffer b = ByteBuffer.allocate(1 << 20);
            for (long at = 0; at < bitBytes; at += b.limit()) {
                b.clear().limit((int) Math.min(b.capacity(), bitBytes - at));
                for (int i = 0; i < b.limit(); i++) {
                    // Past the last block nothing is set, so a scan of the last word never finds a block beyond it.
                    long first = (at + i) * 8;
                    b.put(i, (byte) (!dirty || first >= blocks ? 0 : first + 8 <= blocks ? 0xff : (1 << (int) (blocks - first)) - 1));
                }
                while (b.hasRemaining()) ch.write(b, HEADER + at + b.position());
            }
            ByteBuffer h = headerBytes(shape, created, state, bitsCrc(ch, bitBytes), true, -1);
            while (h.hasRemaining()) ch.write(h, h.position());
            ch.force(true);
        }
        Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        syncDirectory(file.getParent());
        return map(name, file, shape, created, state);
    }

    private static BitmapFile map(String name, Path file, Shape shape, long created, int state) throws IOException {
        FileChannel ch = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE);
        try {
            return new BitmapFile(name, file, shape, created, state, ch);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    /** What {@link #open} found: the bitmap, or why the file cannot be trusted (then {@code state} is the one it claimed, if it could be read). */
    record Opened(BitmapFile bitmap, String damage, int state, long created) {}

    /**
     * Opens {@code file}, made for {@code wanted}; a file that is damaged or was made for something else is left as it
     * is and reported in {@link Opened#damage}. A recording bitmap is marked "bits CRC does not hold" durably before
     * it is returned, as the bits will change. {@code imageStamp}: when the image was last modified, -1 if unknown.
     */
    static Opened open(String name, Path file, Shape wanted, long imageStamp) throws IOException {
        long length = Files.size(file);
        ByteBuffer h = ByteBuffer.allocate(HEADER);
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            while (h.hasRemaining() && ch.read(h, h.position()) > 0) { /* read on */ }
        }
        h.flip();
        if (h.remaining() < FIELDS + 4 || !Arrays.equals(Arrays.copyOf(h.array(), MAGIC.length), MAGIC)) {
            return new Opened(null, "it is not a jnbd dirty bitmap (no header)", RECORDING, -1);
        }
        CRC32C crc = new CRC32C();
        crc.update(h.array(), 0, FIELDS);
        if ((int) crc.getValue() != h.getInt(FIELDS)) return new Opened(null, "its header is damaged (CRC)", RECORDING, -1);
        int version = h.getInt(8), state = h.getInt(12);
        long created = h.getLong(32);
        if (version != VERSION) return new Opened(null, "it is of version " + version + ", not " + VERSION, RECORDING, created);
        if (state != PENDING && state != RECORDING && state != FROZEN) return new Opened(null, "its state " + state + " is unknown", RECORDING, created);
        byte[] identity = new byte[IDENTITY];
        h.get(40, identity);
        Shape found = new Shape(h.getLong(16), h.getLong(24), identity);
        String why = found.mismatch(wanted);
        if (why != null) return new Opened(null, why, state, created);
        if (length != fileSize(found)) return new Opened(null, "it is " + length + " bytes, not " + fileSize(found) + " (cut short?)", state, created);
        BitmapFile b = map(name, file, found, created, state);
        try {
            boolean cleanlyClosed = h.getInt(76) == 1;
            if (cleanlyClosed && b.crc() != h.getInt(72)) {
                b.discard();
                return new Opened(null, "its bits do not match their CRC", state, created);
            }
            long stamp = h.getLong(80);
            if (state == RECORDING && cleanlyClosed && stamp != -1 && imageStamp != -1 && stamp != imageStamp) {
                b.discard();
                return new Opened(null, "the image was modified while no server tracked it", state, created);
            }
            if (state == RECORDING) b.writeHeader(RECORDING, false);
            return new Opened(b, null, state, created);
        } catch (IOException | RuntimeException e) {
            b.discard();
            throw e;
        }
    }

    private static ByteBuffer headerBytes(Shape s, long created, int state, int bitsCrc, boolean crcHolds, long imageStamp) {
        ByteBuffer h = ByteBuffer.allocate(HEADER);
        h.put(MAGIC).putInt(VERSION).putInt(state).putLong(s.granularity).putLong(s.size).putLong(created).put(s.identity)
            .putInt(bitsCrc).putInt(crcHolds ? 1 : 0).putLong(imageStamp);
        CRC32C crc = new CRC32C();
        crc.update(h.array(), 0, FIELDS);
        h.putInt(FIELDS, (int) crc.getValue());
        return h.clear();
    }

    private static int bitsCrc(FileChannel ch, long bitBytes) throws IOException {
        CRC32C crc = new CRC32C();
        ByteBuffer b = ByteBuffer.allocate(1 << 20);
        for (long at = 0; at < bitBytes; ) {
            b.clear().limit((int) Math.min(b.capacity(), bitBytes - at));
            int n = ch.read(b, HEADER + at);
            if (n <= 0) throw new IOException("short read of a bitmap being made");
            crc.update(b.flip());
            at += n;
        }
        return (int) crc.getValue();
    }

    private int crc() {
        CRC32C crc = new CRC32C();
        crc.update(bits.asByteBuffer());
        return (int) crc.getValue();
    }

    /** Rewrites the header with {@code state} (and the bits' CRC, when {@code crcHolds}) and makes it durable. */
    void writeHeader(int newState, boolean crcHolds) throws IOException {
        writeHeader(newState, crcHolds, -1);
    }

    private void writeHeader(int newState, boolean crcHolds, long imageStamp) throws IOException {
        ByteBuffer h = headerBytes(shape, created, newState, crcHolds ? crc() : 0, crcHolds, imageStamp);
        MemorySegment.copy(MemorySegment.ofBuffer(h), 0, header, 0, HEADER);
        header.force();
        state = newState;
    }

    int state() {
        return state;
    }

    /** Sets the bit of every block that bytes [{@code offset}, {@code offset + length}) touch. */
    void mark(long offset, long length) {
        if (length <= 0) return;
        long first = offset >>> shift, last = (offset + length - 1) >>> shift;
        long turned = 0;
        for (long w = first >>> 6; w <= last >>> 6; w++) {
            long lo = w == first >>> 6 ? first & 63 : 0, hi = w == last >>> 6 ? last & 63 : 63;
            long mask = (-1L >>> (63 - hi)) & (-1L << lo);
            long at = w * 8;
            // Only the first mark of a block writes: the page stays clean, and a flush finds nothing to do.
            if (((long) WORD.get(bits, at) & mask) == mask) continue;
            long old = (long) WORD.getAndBitwiseOr(bits, at, mask);
            turned |= mask & ~old;
        }
        if (turned != 0) marked.incrementAndGet();
    }

    boolean dirty(long block) {
        return ((long) WORD.get(bits, (block >>> 6) * 8) & (1L << (block & 63))) != 0;
    }

    /** Makes every mark so far durable; cheap when none was made since the last. */
    void force() {
        long m = marked.get();
        if (forced >= m) return;
        synchronized (forcing) {
            if (forced >= m) return;
            long now = marked.get();
            bits.force();
            forced = now;
        }
    }

    /** Every block clean, durably; the CRC, if it holds, follows. */
    void clear() throws IOException {
        bits.fill((byte) 0);
        bits.force();
        if (state == FROZEN) writeHeader(FROZEN, true);
    }

    /** How many bytes of the export the bitmap reports dirty. */
    long dirtyBytes() {
        long n = 0, words = (shape.blocks() + 63) / 64;
        for (long w = 0; w < words; w++) n += Long.bitCount((long) WORD.get(bits, w * 8));
        long bytes = n * shape.granularity;
        if (shape.blocks() > 0 && dirty(shape.blocks() - 1)) bytes -= shape.blocks() * shape.granularity - shape.size;
        return bytes;
    }

    /**
     * The state of bytes from {@code offset}: runs of equal blocks merged, the first from {@code offset} even inside a
     * block (with that block's state), covering up to {@code length} bytes or the export's end, in at most
     * {@link #MAX_EXTENTS} extents.
     */
    List<MetaExtent> extents(long offset, long length) {
        long end = Math.min(shape.size, offset + length);
        List<MetaExtent> out = new ArrayList<>();
        long at = offset;
        while (at < end && out.size() < MAX_EXTENTS) {
            long block = at >>> shift;
            boolean d = dirty(block);
            long limit = ((end - 1) >>> shift) + 1;
            long next = nextDifferent(block + 1, limit, d);
            long to = Math.min(end, next << shift);
            out.add(new MetaExtent(to - at, d ? 1 : 0));
            at = to;
        }
        return out;
    }

    /** The first block from {@code from} below {@code limit} whose state is not {@code dirty}, or {@code limit}. */
    private long nextDifferent(long from, long limit, boolean dirty) {
        long i = from;
        while (i < limit) {
            long w = (long) WORD.get(bits, (i >>> 6) * 8);
            if (dirty) w = ~w;
            w &= -1L << (i & 63);
            if (w != 0) return Math.min(limit, (i & ~63L) + Long.numberOfTrailingZeros(w));
            i = (i | 63) + 1;
        }
        return limit;
    }

    @Override
    public void close() throws IOException {
        close(-1);
    }

    /**
     * Closes the file; a recording bitmap first records its bits' CRC and {@code imageStamp} (when the image was last
     * modified, -1 if unknown), so that the next open can check them.
     */
    void close(long imageStamp) throws IOException {
        try {
            if (arena.scope().isAlive()) {
                bits.force();
                if (state == RECORDING) writeHeader(RECORDING, true, imageStamp);
            }
        } finally {
            try {
                if (arena.scope().isAlive()) arena.close();
            } finally {
                channel.close();
            }
        }
    }

    /** Closes the mapping without touching the file (it is about to be deleted, or was never taken into use). */
    void discard() throws IOException {
        try {
            if (arena.scope().isAlive()) arena.close();
        } finally {
            channel.close();
        }
    }

    static void syncDirectory(Path dir) throws IOException {
        try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
            d.force(true);
        }
    }
}
