package io.jnbd.server.filter.cow;

import java.io.Closeable;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.zip.CRC32C;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The block map of one overlay on disk: which blocks the overlay holds (their data at the same offset in its data
 * file) and which read as zeroes. An append-only log, replayed at open:
 *
 * <pre>
 * header, 4096 bytes:  "JNBDCOW1" | version (int, 1) | block size (int) | export size (long)
 *                      | base fingerprint (32 bytes) | CRC-32C of the 56 bytes before it (int) | zeroes
 * then records, 16 bytes each: block index (long) | state (int: 1 data, 2 zero) | CRC-32C of the 12 bytes before it
 * </pre>
 *
 * A later record of a block overrides an earlier one. Records are appended only after the data they find has been
 * made durable (see {@link Overlay#flush}), and each batch is made durable before the FLUSH that wrote it is answered;
 * so a crash can leave only a torn last batch, which the CRCs find: the log is cut before the first bad record, losing
 * only changes no FLUSH acknowledged. A bad header, or a record naming a block past the end, is damage no crash makes:
 * the overlay is refused. The map is created whole under another name and renamed, so a crash while creating it leaves
 * no half map.
 */
final class OverlayMap implements Closeable {
    private static final Logger log = LoggerFactory.getLogger(OverlayMap.class);
    static final int HEADER = 4096, RECORD = 16;
    private static final byte[] MAGIC = "JNBDCOW1".getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    private static final int VERSION = 1, HEADER_FIELDS = 56;

    /** What an overlay was made for: a refusal names the first field that differs. */
    record Header(int blockSize, long size, byte[] fingerprint) {
        /** Why an overlay made for {@code this} cannot serve {@code wanted}, or null. */
        String mismatch(Header wanted) {
            if (size != wanted.size) return "the base is " + wanted.size + " bytes, the overlay was made over " + size + " bytes";
            if (!Arrays.equals(fingerprint, wanted.fingerprint)) return "the base's contents changed since the overlay was made";
            if (blockSize != wanted.blockSize) return "the overlay was made with cow-block-size=" + blockSize + ", not " + wanted.blockSize;
            return null;
        }
    }

    private final Path file;
    private final FileChannel channel;
    private long end;
    private long records;

    private OverlayMap(Path file, FileChannel channel, long end, long records) {
        this.file = file;
        this.channel = channel;
        this.end = end;
        this.records = records;
    }

    /** Writes a new map with no records, whole, as {@code file}. */
    static void create(Path file, Header h) throws IOException {
        writeWhole(file, h, new byte[0]);
    }

    /**
     * Opens the map at {@code file}, replays it into {@code states} (one byte a block, {@link Overlay#DATA} or
     * {@link Overlay#ZERO} where a record says so) and cuts a torn tail. {@code name} is for messages.
     */
    static OverlayMap open(Path file, Header wanted, byte[] states, String name) throws IOException {
        FileChannel ch = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE);
        try {
            ByteBuffer head = ByteBuffer.allocate(HEADER);
            while (head.hasRemaining() && ch.read(head, head.position()) > 0) { /* read on */ }
            Header found = decodeHeader(head.flip());
            if (found == null) throw new IOException("overlay '" + name + "': its map " + file + " has a damaged header; refusing it");
            String why = found.mismatch(wanted);
            if (why != null) {
                throw new IOException("overlay '" + name + "' does not fit its base: " + why
                    + "; refusing it (discard the overlay, or serve the base it was made over)");
            }
            long size = ch.size();
            long[] replayed = replay(ch, states, name);
            long at = replayed[0], count = replayed[1];
            if (at < size) {
                // Only the batch being appended when the server stopped can be torn; no FLUSH acknowledged it.
                log.warn("overlay '{}': cutting a torn end of its map ({} bytes from {}), left by a crash before a flush ended",
                    name, size - at, at);
                ch.truncate(at);
                ch.force(true);
            }
            return new OverlayMap(file, ch, at, count);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    /** Replays the records of {@code ch} into {@code states}: where the first bad record starts, and how many were good. */
    private static long[] replay(FileChannel ch, byte[] states, String name) throws IOException {
        long size = ch.size(), at = HEADER, count = 0;
        ByteBuffer buf = ByteBuffer.allocateDirect(64 * RECORD * 64);
        CRC32C crc = new CRC32C();
        replay:
        while (at < size) {
            buf.clear();
            long chunkAt = at;
            while (buf.hasRemaining() && chunkAt + buf.position() < size && ch.read(buf, chunkAt + buf.position()) > 0) { /* on */ }
            buf.flip();
            while (buf.remaining() >= RECORD) {
                long block = buf.getLong(buf.position());
                int state = buf.getInt(buf.position() + 8), sum = buf.getInt(buf.position() + 12);
                crc.reset();
                crc.update(buf.slice(buf.position(), 12));
                if ((int) crc.getValue() != sum || (state != Overlay.DATA && state != Overlay.ZERO)) break replay;
                if (block < 0 || block >= states.length) {
                    throw new IOException("overlay '" + name + "': its map names block " + block + " of " + states.length
                        + "; the map is damaged, refusing it");
                }
                states[(int) block] = (byte) state;
                buf.position(buf.position() + RECORD);
                at += RECORD;
                count++;
            }
            if (buf.hasRemaining()) break; // a partial record at the very end
        }
        return new long[] {at, count};
    }

    /**
     * What the map at {@code file} says, read without changing it (for {@code jnbd overlay list}): its header, and the
     * state of each block as the records that are whole have it.
     */
    static Summary summary(Path file, String name) throws IOException {
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            ByteBuffer head = ByteBuffer.allocate(HEADER);
            while (head.hasRemaining() && ch.read(head, head.position()) > 0) { /* read on */ }
            Header h = decodeHeader(head.flip());
            if (h == null) throw new IOException("overlay '" + name + "': its map " + file + " has a damaged header");
            byte[] states = new byte[Overlay.blocks(h.size(), h.blockSize())];
            replay(ch, states, name);
            return new Summary(h, states);
        }
    }

    record Summary(Header header, byte[] states) {}

    /** Appends a record for each of the first {@code n} {@code blocks} with its state in {@code states}, and makes them durable. */
    void append(int[] blocks, byte[] states, int n) throws IOException {
        ByteBuffer out = ByteBuffer.allocate(n * RECORD);
        CRC32C crc = new CRC32C();
        for (int i = 0; i < n; i++) record(out, crc, blocks[i], states[i]);
        out.flip();
        long at = end;
        while (out.hasRemaining()) at += channel.write(out, at);
        channel.force(false);
        end = at;
        records += n;
    }

    /** Records in the log, the overridden ones included. */
    long records() {
        return records;
    }

    /**
     * Replaces the log with one record for each block that is not absent: written whole under another name, made
     * durable, then renamed over the map, so a crash leaves the old log or the new one. The caller stops using this map.
     */
    static void rewrite(Path file, Header h, byte[] states) throws IOException {
        writeWhole(file, h, states);
    }

    private static void writeWhole(Path file, Header h, byte[] states) throws IOException {
        Path tmp = file.resolveSibling(file.getFileName() + ".new");
        try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING,
                StandardOpenOption.WRITE)) {
            ByteBuffer head = ByteBuffer.allocate(HEADER);
            encodeHeader(head, h);
            writeFully(ch, head.flip(), 0);
            long at = HEADER;
            ByteBuffer out = ByteBuffer.allocateDirect(4096 * RECORD);
            CRC32C crc = new CRC32C();
            for (int b = 0; b < states.length; b++) {
                if (states[b] == Overlay.ABSENT) continue;
                record(out, crc, b, states[b]);
                if (!out.hasRemaining()) at += writeFully(ch, out.flip(), at);
            }
            writeFully(ch, out.flip(), at);
            ch.force(true);
        }
        try {
            Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (AtomicMoveNotSupportedException e) {
            throw new IOException("cannot rename " + tmp + " over " + file + " atomically", e);
        }
        syncDirectory(file.getParent());
    }

    private static void record(ByteBuffer out, CRC32C crc, long block, byte state) {
        int at = out.position();
        out.putLong(block).putInt(state);
        crc.reset();
        crc.update(out.slice(at, 12));
        out.putInt((int) crc.getValue());
    }

    private static int writeFully(FileChannel ch, ByteBuffer b, long at) throws IOException {
        int n = 0;
        while (b.hasRemaining()) n += ch.write(b, at + n);
        b.clear();
        return n;
    }

    private static void encodeHeader(ByteBuffer b, Header h) {
        b.put(MAGIC).putInt(VERSION).putInt(h.blockSize()).putLong(h.size()).put(h.fingerprint());
        CRC32C crc = new CRC32C();
        crc.update(b.array(), 0, HEADER_FIELDS);
        b.putInt((int) crc.getValue());
        b.position(HEADER);
    }

    /** The header, or null when it is not one this version wrote whole. */
    private static Header decodeHeader(ByteBuffer b) {
        if (b.remaining() < HEADER_FIELDS + 4) return null;
        byte[] magic = new byte[MAGIC.length];
        b.get(magic);
        CRC32C crc = new CRC32C();
        crc.update(b.array(), 0, HEADER_FIELDS);
        if (!Arrays.equals(magic, MAGIC) || b.getInt(HEADER_FIELDS) != (int) crc.getValue() || b.getInt() != VERSION) return null;
        int blockSize = b.getInt();
        long size = b.getLong();
        byte[] fingerprint = new byte[BaseFingerprint.LENGTH];
        b.get(fingerprint);
        return new Header(blockSize, size, fingerprint);
    }

    /** Makes a rename or a new file in {@code dir} durable. */
    static void syncDirectory(Path dir) throws IOException {
        try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
            d.force(true);
        }
    }

    Path file() {
        return file;
    }

    @Override
    public void close() throws IOException {
        channel.close();
    }
}
