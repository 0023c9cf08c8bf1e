package io.jnbd.server.backend;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A sparse RAM disk. Storage is off-heap, allocated a page at a time on first write and dropped by
 * trim or zero, so an idle 1 TiB export costs nothing. Dropped pages are released by the GC's cleaner
 * rather than freed at once: a reader racing with a trim may still hold the page, and must never see
 * freed memory.
 */
public final class MemoryBackend implements Backend {
    /** Page size: large enough to keep the map small, small enough that sparse writes stay cheap. */
    static final int PAGE = 64 * 1024;
    private static final Set<Capability> CAPS = EnumSet.of(Capability.WRITE, Capability.FLUSH, Capability.FUA,
        Capability.TRIM, Capability.ZERO, Capability.FAST_ZERO, Capability.CACHE, Capability.EXTENTS,
        Capability.MULTI_CONN);

    private final long size;
    private final ConcurrentHashMap<Long, MemorySegment> pages = new ConcurrentHashMap<>();
    private final AtomicLong allocated = new AtomicLong();
    /** The data lives and dies with this object: a new one is another export, whatever its name and size. */
    private final String identity = java.util.HexFormat.of().toHexDigits(new java.security.SecureRandom().nextLong());

    public MemoryBackend(long size) {
        if (size < 0) throw new IllegalArgumentException("negative size");
        this.size = size;
    }

    @Override public long size() { return size; }
    @Override public Set<Trait> traits() { return Set.of(Trait.NEVER_BLOCKS); }
    @Override public Set<Capability> capabilities() { return CAPS; }
    @Override public String describe() { return "memory (" + allocatedBytes() + " bytes allocated)"; }
    @Override public String identity() { return identity; }

    public long allocatedBytes() {
        return allocated.get();
    }

    @Override
    public void read(long offset, ByteBuffer dst) {
        MemorySegment out = MemorySegment.ofBuffer(dst);
        long done = 0, total = dst.remaining();
        while (done < total) {
            long pos = offset + done;
            int inPage = (int) (pos % PAGE);
            long n = Math.min(PAGE - inPage, total - done);
            MemorySegment page = pages.get(pos / PAGE);
            if (page == null) out.asSlice(done, n).fill((byte) 0);
            else MemorySegment.copy(page, inPage, out, done, n);
            done += n;
        }
        dst.position(dst.limit());
    }

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) {
        MemorySegment in = MemorySegment.ofBuffer(src);
        long done = 0, total = src.remaining();
        while (done < total) {
            long pos = offset + done;
            int inPage = (int) (pos % PAGE);
            long n = Math.min(PAGE - inPage, total - done);
            MemorySegment.copy(in, done, page(pos / PAGE), inPage, n);
            done += n;
        }
        src.position(src.limit());
    }

    private MemorySegment page(long index) {
        return pages.computeIfAbsent(index, i -> {
            allocated.addAndGet(PAGE);
            return Arena.ofAuto().allocate(PAGE, 4096); // zero-filled by the allocator
        });
    }

    @Override public void flush() {}

    @Override
    public void trim(long offset, long length, boolean fua) {
        discard(offset, length);
    }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) {
        if (mayTrim) discard(offset, length);
        else provisionZeroes(offset, length);
    }

    /** NO_HOLE: the range must stay allocated, so its pages are kept (or allocated) and filled with zeroes. */
    private void provisionZeroes(long offset, long length) {
        long end = offset + length;
        long pos = offset;
        while (pos < end) {
            int inPage = (int) (pos % PAGE);
            long n = Math.min(PAGE - inPage, end - pos);
            page(pos / PAGE).asSlice(inPage, n).fill((byte) 0);
            pos += n;
        }
    }

    /** Drops whole pages in the range and zeroes the partial pages at its ends. */
    private void discard(long offset, long length) {
        long end = offset + length;
        long pos = offset;
        while (pos < end) {
            long index = pos / PAGE;
            int inPage = (int) (pos % PAGE);
            long n = Math.min(PAGE - inPage, end - pos);
            if (n == PAGE) {
                if (pages.remove(index) != null) allocated.addAndGet(-PAGE);
            } else {
                MemorySegment page = pages.get(index);
                if (page != null) page.asSlice(inPage, n).fill((byte) 0);
            }
            pos += n;
        }
    }

    @Override
    public List<Extent> extents(long offset, long length) {
        List<Extent> out = new ArrayList<>();
        long end = offset + length, pos = offset;
        while (pos < end) {
            boolean data = pages.containsKey(pos / PAGE);
            long runStart = pos;
            while (pos < end && pages.containsKey(pos / PAGE) == data) {
                pos = Math.min(end, (pos / PAGE + 1) * PAGE);
            }
            out.add(new Extent(pos - runStart, !data, !data));
            if (out.size() >= 65536) break;
        }
        return out;
    }

    @Override
    public void close() {
        pages.clear();
        allocated.set(0);
    }
}
