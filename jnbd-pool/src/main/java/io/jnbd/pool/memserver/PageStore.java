package io.jnbd.pool.memserver;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.Collections;
import java.util.Map;
import java.util.function.LongPredicate;

/**
 * The storage engine of a memory server: pages of many remote clients in RAM, with a spill file behind
 * the RAM for when it is full (the NMS design: a server's RAM cache plus backing store).
 *
 * <p><b>Addressing.</b> A client's virtual unit is a space, {@code (client << 16) | unit}; a page is
 * {@link #PAGE} bytes of a space. Internally a page is the key {@code space << 28 | pageIndex} (offsets are
 * below 2^44, so indexes below 2^28).
 *
 * <p><b>Where pages live.</b> {@link PageTable} maps each page that holds data to a RAM frame
 * ({@link RamTier}) or a spill slot ({@link SpillFile}); a page that is not in it reads as zeroes. New
 * pages and pages that are used go to RAM. When RAM is full, CLOCK picks a page not used since the hand
 * last passed (nor since it arrived: a page written once and never again goes before one read since),
 * writes it to a free slot and hands its frame over; a read or write of a spilled page brings it back. {@link Tiers} does all of this one page at a time, and says how it locks.
 *
 * <p><b>Capacity.</b> {@link Ledger} counts every page against RAM plus spill and against its client's
 * quota before a write copies a byte, so a refused write changes nothing.
 *
 * <p>Metadata per page: 16-32 bytes of table, plus 13 bytes per RAM frame and 4 per freed spill slot.
 */
public final class PageStore implements AutoCloseable {
    public static final int PAGE = 64 * 1024;
    private static final int PAGE_SHIFT = 16;
    private static final int IN_PAGE = PAGE - 1;
    private static final int INDEX_BITS = 28;
    private static final long INDEX_MASK = (1L << INDEX_BITS) - 1;
    private static final long SPACE_LIMIT = 1L << (INDEX_BITS + PAGE_SHIFT);
    /** Enough that threads on different pages rarely share one; each costs about 300 bytes when empty. */
    private static final int STRIPES = 1024;

    private final Ledger ledger;
    private final Tiers tiers;
    private final int frames;
    private final int slots;
    private final Path spillPath;

    /**
     * @param ramBytes    the RAM tier's capacity, a multiple of {@link #PAGE}, {@code > 0}
     * @param spillDir    where the spill file goes, or null for no disk tier
     * @param spillBytes  the spill file's capacity, a multiple of {@link #PAGE}; 0 when {@code spillDir} is null
     * @param clientQuota the most bytes one client may hold in both tiers together (whole pages count), 0 for no limit
     */
    public PageStore(long ramBytes, Path spillDir, long spillBytes, long clientQuota) throws IOException {
        if (ramBytes <= 0 || ramBytes % PAGE != 0 || ramBytes / PAGE > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("RAM tier of " + ramBytes + " bytes: must be a positive multiple of " + PAGE);
        }
        if (spillDir == null ? spillBytes != 0 : spillBytes <= 0 || spillBytes % PAGE != 0 || spillBytes / PAGE > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("spill tier of " + spillBytes + " bytes in " + spillDir
                + ": must be a positive multiple of " + PAGE + " with a directory, 0 without");
        }
        if (clientQuota < 0) throw new IllegalArgumentException("negative client quota");
        frames = (int) (ramBytes / PAGE);
        slots = (int) (spillBytes / PAGE);
        SpillFile spill = spillDir == null ? null : SpillFile.create(spillDir, slots);
        spillPath = spill == null ? null : spill.path();
        ledger = new Ledger((long) frames + slots, clientQuota == 0 ? Long.MAX_VALUE : clientQuota / PAGE);
        tiers = new Tiers(new PageTable(STRIPES), new RamTier(frames), spill, ledger);
    }

    public static int space(int client, int unit) {
        if ((client & ~0xFFFF) != 0 || (unit & ~0xFFFF) != 0) {
            throw new IllegalArgumentException("client " + client + " and unit " + unit + " must be 16-bit");
        }
        return client << 16 | unit;
    }

    public static int clientOf(int space) {
        return space >>> 16;
    }

    static long key(int space, long pageIndex) {
        return Integer.toUnsignedLong(space) << INDEX_BITS | pageIndex;
    }

    static int spaceOf(long key) {
        return (int) (key >>> INDEX_BITS);
    }

    /**
     * Writes {@code src} (position to limit, advancing position) at {@code offset}. The pages the write
     * needs are counted before anything is copied; if they do not fit, it throws {@link StoreFullException}
     * and changes nothing.
     */
    public void write(int space, long offset, ByteBuffer src) throws IOException {
        int length = src.remaining();
        checkRange(offset, length);
        if (length == 0) return;
        long first = offset >>> PAGE_SHIFT, last = (offset + length - 1) >>> PAGE_SHIFT;
        long missing = 0;
        for (long index = first; index <= last; index++) if (!tiers.exists(key(space, index))) missing++;
        try (Ledger.Reservation reserved = ledger.reservation(clientOf(space), missing)) {
            MemorySegment in = MemorySegment.ofBuffer(src);
            for (long done = 0; done < length; ) {
                long pos = offset + done;
                int inPage = (int) (pos & IN_PAGE);
                int n = (int) Math.min(PAGE - inPage, length - done);
                tiers.write(key(space, pos >>> PAGE_SHIFT), inPage, in, src, done, n, reserved);
                done += n;
            }
        }
        src.position(src.limit());
    }

    /** Fills {@code dst} (position to limit, advancing position); bytes never written read as zeroes. */
    public void read(int space, long offset, ByteBuffer dst) throws IOException {
        int length = dst.remaining();
        checkRange(offset, length);
        MemorySegment out = MemorySegment.ofBuffer(dst);
        for (long done = 0; done < length; ) {
            long pos = offset + done;
            int inPage = (int) (pos & IN_PAGE);
            int n = (int) Math.min(PAGE - inPage, length - done);
            tiers.read(key(space, pos >>> PAGE_SHIFT), inPage, out, dst, done, n);
            done += n;
        }
        dst.position(dst.limit());
    }

    /** Drops the whole pages inside the range, giving back their frames or slots, and zeroes partial ones. */
    public void discard(int space, long offset, long length) throws IOException {
        checkRange(offset, length);
        if (length == 0) return;
        long end = offset + length;
        long firstWhole = offset >>> PAGE_SHIFT;
        int headIn = (int) (offset & IN_PAGE);
        if (headIn != 0) {
            tiers.zero(key(space, firstWhole), headIn, (int) Math.min(PAGE - headIn, length));
            firstWhole++;
        }
        long endWhole = end >>> PAGE_SHIFT;
        int tailLength = (int) (end & IN_PAGE);
        if (tailLength != 0 && endWhole >= firstWhole) tiers.zero(key(space, endWhole), 0, tailLength);
        if (endWhole > firstWhole) dropPages(space, firstWhole, endWhole);
    }

    /** Whether any page the range touches holds data. */
    public boolean hasData(int space, long offset, long length) {
        checkRange(offset, length);
        if (length == 0 || ledger.spacePages(space) == 0) return false;
        long first = offset >>> PAGE_SHIFT, last = (offset + length - 1) >>> PAGE_SHIFT;
        if (probeRatherThanScan(last - first + 1)) {
            for (long index = first; index <= last; index++) if (tiers.exists(key(space, index))) return true;
            return false;
        }
        return tiers.anyMatch(inRange(space, first, last + 1));
    }

    public void dropSpace(int space) {
        if (ledger.spacePages(space) != 0) tiers.removeAll(key -> spaceOf(key) == space);
    }

    public void dropClient(int client) {
        if ((client & ~0xFFFF) != 0) throw new IllegalArgumentException("client " + client + " must be 16-bit");
        if (ledger.clientPages(client) != 0) tiers.removeAll(key -> clientOf(spaceOf(key)) == client);
    }

    /** Bytes the client holds in both tiers, including pages that writes in progress have reserved. */
    public long usedBytes(int client) {
        if ((client & ~0xFFFF) != 0) throw new IllegalArgumentException("client " + client + " must be 16-bit");
        return ledger.clientPages(client) * PAGE;
    }

    public long ramUsedBytes() {
        return (long) tiers.ramHolding() * PAGE;
    }

    public long ramBytes() {
        return (long) frames * PAGE;
    }

    public long spillUsedBytes() {
        return (long) tiers.spillUsed() * PAGE;
    }

    public long spillBytes() {
        return (long) slots * PAGE;
    }

    /** What new data still fits: free RAM plus free spill, less what writes in progress have reserved. */
    public long freeBytes() {
        return ledger.free() * PAGE;
    }

    /** Every space that holds data, with the bytes it holds. */
    public Map<Integer, Long> spaces() {
        Map<Integer, Long> bytes = ledger.spaces();
        bytes.replaceAll((space, pages) -> pages * PAGE);
        return Collections.unmodifiableMap(bytes);
    }

    /** The spill file, for tests; null without a disk tier. */
    Path spillPath() {
        return spillPath;
    }

    /**
     * Frees all RAM and deletes the spill file. Waits for page operations in progress to finish; any that
     * come later throw {@link IllegalStateException}.
     */
    @Override
    public void close() {
        tiers.close();
    }

    /** Drops pages {@code [from, to)} of the space. */
    private void dropPages(int space, long from, long to) {
        if (ledger.spacePages(space) == 0) return;
        if (probeRatherThanScan(to - from)) for (long index = from; index < to; index++) tiers.remove(key(space, index));
        else tiers.removeAll(inRange(space, from, to));
    }

    /**
     * Whether to visit a range of pages one lock and lookup at a time, or to scan every stripe: a scan costs
     * about as much as probing a thousand pages (a lock per stripe) plus a pass over every table slot,
     * some two per page held, at a fraction of a probe's cost each.
     */
    private boolean probeRatherThanScan(long pages) {
        return pages <= STRIPES + ledger.committed() / 16;
    }

    private static LongPredicate inRange(int space, long from, long to) {
        return key -> spaceOf(key) == space && (key & INDEX_MASK) >= from && (key & INDEX_MASK) < to;
    }

    private static void checkRange(long offset, long length) {
        if (offset < 0 || length < 0 || offset > SPACE_LIMIT - length) {
            throw new IllegalArgumentException("range " + offset + "+" + length + " outside a space of 2^44 bytes");
        }
    }
}
