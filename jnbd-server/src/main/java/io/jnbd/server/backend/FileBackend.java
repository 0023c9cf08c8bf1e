package io.jnbd.server.backend;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.io.Errno;
import io.jnbd.server.io.NativeIo;
import io.jnbd.server.io.PageCacheSource;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;

/**
 * A regular file or block device. In {@code cached} mode reads and writes go through the page cache and
 * reads can leave by sendfile; in {@code direct} mode the file is opened with {@code O_DIRECT}, and
 * requests that are not aligned to the device are served through an aligned bounce buffer.
 */
public final class FileBackend implements Backend {

    public enum Mode { CACHED, DIRECT }

    /** Upper bound on the extents of one block status reply, to bound the reply's size. */
    private static final int MAX_EXTENTS = 65536;
    private static final int ZERO_CHUNK = 1 << 20;

    private final Path path;
    private final Mode mode;
    private final boolean readOnly;
    private final boolean blockDevice;
    private final FileChannel channel;
    private final int nativeFd; // -1 without native access
    /** What cached reads may take without passing through read(); null in direct mode. */
    private final PageCacheSource pageCache;
    private final int writevFd; // same file, same O_DIRECT-ness as the channel, for native writes; -1 if none
    private final long size;
    private final int alignment;
    /** Asked once or twice per request (Export.streamed, the write split): made once rather than per call. */
    private final BlockSizes blockSizes;
    /**
     * What a write through {@code writevFd} must be aligned to, offset, length and memory, in direct mode: what the
     * device takes (512 on most disks), which can be less than {@link #alignment}, the filesystem's block that the
     * JDK's channel insists on. A write aligned to it goes straight to the disk; a smaller or ragged one needs a
     * read-modify-write of the blocks around it. 1 KiB writes at QD1 to a 512-byte-sector disk did that for
     * every request: 6.8-7.4 MiB/s against qemu-nbd's 14.4 (issue 16).
     */
    private final int writeAlignment;
    private final Set<Capability> caps;
    /**
     * A read-modify-write rewrites the whole blocks around the bytes it was asked to write, so no other change
     * to those blocks may land between its read and its write, or the write-back would undo it. Changes that
     * need no read-modify-write share this lock; a read-modify-write holds it alone. The lock belongs to the
     * file, not to this backend: another export of the same file (cached or direct) takes it too.
     */
    private final SharedFileLock blockLock;
    private final ByteBuffer zeroes;
    /** The opened file's device and inode: the same file after a server's restart, even under another path. */
    private final String identity;

    /**
     * Opens {@code path}; when {@code wantedSize} is positive the file is created if missing and grown if
     * smaller (a sparse grow, no blocks are written).
     */
    public FileBackend(Path path, Mode mode, boolean readOnly, long wantedSize) throws IOException {
        this.path = path;
        this.mode = mode;
        this.readOnly = readOnly;
        if (!Files.exists(path)) {
            if (wantedSize <= 0) throw new NoSuchFileException(path.toString(), null, "no such file (add size= to create it)");
            if (readOnly) throw new NoSuchFileException(path.toString(), null, "no such file (a read-only export cannot create it)");
            if (path.getParent() != null) Files.createDirectories(path.getParent());
        }
        this.blockDevice = Files.exists(path)
            && Files.readAttributes(path, BasicFileAttributes.class).isOther();
        if (!blockDevice && !readOnly && wantedSize > 0) {
            try (FileChannel grow = FileChannel.open(path, StandardOpenOption.CREATE, StandardOpenOption.WRITE)) {
                if (grow.size() < wantedSize) {
                    // Writing the last byte would allocate a block; truncate grows the file sparsely.
                    try (var raf = new java.io.RandomAccessFile(path.toFile(), "rw")) {
                        raf.setLength(wantedSize);
                    }
                }
            }
        }
        List<OpenOption> options = new ArrayList<>(List.of(StandardOpenOption.READ));
        if (!readOnly) options.add(StandardOpenOption.WRITE);
        if (mode == Mode.DIRECT) options.add(com.sun.nio.file.ExtendedOpenOption.DIRECT);
        this.channel = FileChannel.open(path, options.toArray(OpenOption[]::new));
        this.identity = identityOf(path);
        this.blockLock = SharedFileLock.of(path);
        int fd = -1;
        try {
            fd = NativeIo.open(path, !readOnly).orElse(-1);
        } catch (IOException e) {
            fd = -1; // sparse features degrade to portable fallbacks
        }
        this.nativeFd = fd;
        this.pageCache = mode == Mode.CACHED ? PageCacheSource.of(path, channel, fd) : null;
        int wfd = -1;
        if (!readOnly && fd >= 0) {
            try {
                wfd = mode == Mode.DIRECT ? NativeIo.open(path, true, NativeIo.O_DIRECT).orElse(-1) : fd;
            } catch (IOException e) {
                wfd = -1;
            }
        }
        this.writevFd = wfd;
        long s = channel.size();
        if (s == 0 && blockDevice && fd >= 0) s = NativeIo.lseek(fd, 0, NativeIo.SEEK_END);
        this.size = s;
        int align = 1;
        if (mode == Mode.DIRECT) {
            align = (int) Math.max(512, Files.getFileStore(path).getBlockSize());
        }
        this.alignment = align;
        // Direct mode serves unaligned requests too (through a bounce buffer); advertising the device's
        // alignment as the preferred size steers well-behaved clients onto the fast path.
        this.blockSizes = mode == Mode.DIRECT ? new BlockSizes(512, Math.max(4096, align), Nbd.DEFAULT_MAX_PAYLOAD) : BlockSizes.DEFAULT;
        this.writeAlignment = wfd >= 0 && mode == Mode.DIRECT ? directWriteAlignment(wfd, align) : align;
        this.zeroes = Arena.ofAuto().allocate(ZERO_CHUNK, Math.max(align, 4096)).asByteBuffer().asReadOnlyBuffer();
        EnumSet<Capability> c = EnumSet.of(Capability.FLUSH, Capability.CACHE, Capability.MULTI_CONN);
        if (!readOnly) c.addAll(EnumSet.of(Capability.WRITE, Capability.FUA, Capability.TRIM, Capability.ZERO, Capability.FAST_ZERO));
        if (nativeFd >= 0 && !blockDevice) c.add(Capability.EXTENTS);
        this.caps = Set.copyOf(c);
    }

    @Override public long size() { return size; }
    @Override public Set<Capability> capabilities() { return caps; }

    public Mode mode() { return mode; }

    /** The file or device served. */
    public Path path() { return path; }

    /** See {@link #writeAlignment}; 1 in cached mode. */
    int writeAlignment() { return writeAlignment; }

    @Override
    public BlockSizes blockSizes() {
        return blockSizes;
    }

    @Override
    public Set<Trait> traits() {
        return mode == Mode.CACHED ? Set.of(Trait.ZERO_COPY, Trait.CACHED_READS) : Set.of(Trait.DIRECT_IO);
    }

    @Override
    public boolean readIfCached(long offset, ByteBuffer dst) throws IOException {
        return pageCache != null && pageCache.readIfCached(dst, offset);
    }

    @Override
    public PageCacheSource pageCache() {
        return pageCache;
    }

    @Override
    public String identity() {
        return identity;
    }

    /**
     * A digest of the device and inode (of the file key's text where the file system has no unix view); null if
     * neither. Digested because any client may ask for it, and it has no business learning the server's numbers.
     */
    private static String identityOf(Path path) {
        String raw;
        try {
            var unix = Files.readAttributes(path, "unix:dev,ino");
            raw = unix.get("dev") + ":" + unix.get("ino");
        } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
            try {
                Object key = Files.readAttributes(path, BasicFileAttributes.class).fileKey();
                if (key == null) return null;
                raw = key.toString();
            } catch (IOException again) {
                return null;
            }
        }
        try {
            byte[] d = java.security.MessageDigest.getInstance("SHA-256").digest(raw.getBytes(java.nio.charset.StandardCharsets.UTF_8));
            return java.util.HexFormat.of().formatHex(d, 0, 16);
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new AssertionError("every JDK has SHA-256", e);
        }
    }

    @Override
    public String describe() {
        return "file:" + path + " (" + mode.name().toLowerCase() + (blockDevice ? ", block device" : "") + ")";
    }

    private boolean aligned(long offset, ByteBuffer buf) {
        return aligned(offset, buf, alignment);
    }

    private static boolean aligned(long offset, ByteBuffer buf, int alignment) {
        if (alignment == 1) return true;
        return offset % alignment == 0 && buf.remaining() % alignment == 0 && buf.isDirect()
            && MemorySegment.ofBuffer(buf).address() % alignment == 0;
    }

    /**
     * The smallest of 512, 1024, 2048 that an O_DIRECT read on {@code fd} accepts for offset, length and memory
     * at once (the kernel refuses a misaligned one with EINVAL, before it looks at the file's end), else
     * {@code fallback}. Reading, so that nothing is written to find out.
     */
    private static int directWriteAlignment(int fd, int fallback) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment page = arena.allocate(8192, 4096);
            for (int n = 512; n < fallback; n *= 2) {
                // memory aligned to n but not to 2n, so that a larger requirement shows
                ByteBuffer probe = page.asSlice(n, n).asByteBuffer();
                try {
                    NativeIo.pread(fd, probe, n);
                    return n;
                } catch (NativeIo.ErrnoException e) {
                    if (e.errno() != Errno.EINVAL) return fallback;
                }
            }
        } catch (IOException | RuntimeException e) {
            return fallback;
        }
        return fallback;
    }

    @Override
    public void read(long offset, ByteBuffer dst) throws IOException {
        if (aligned(offset, dst)) {
            readFully(offset, dst);
            return;
        }
        long start = offset - offset % alignment;
        long end = roundUp(offset + dst.remaining());
        try (Arena arena = Arena.ofConfined()) {
            ByteBuffer bounce = arena.allocate(end - start, alignment).asByteBuffer();
            readFully(start, bounce);
            bounce.position((int) (offset - start)).limit((int) (offset - start) + dst.remaining());
            dst.put(bounce);
        }
    }

    private long roundUp(long v) {
        long r = v % alignment;
        return r == 0 ? v : v + alignment - r;
    }

    /** Reads until {@code dst} is full; bytes past the end of the file read as zeroes. */
    private void readFully(long offset, ByteBuffer dst) throws IOException {
        long pos = offset;
        while (dst.hasRemaining()) {
            int n = channel.read(dst, pos);
            if (n < 0) {
                // O_DIRECT reads of the last partial block end short; the rest is beyond the export.
                while (dst.hasRemaining()) dst.put((byte) 0);
                return;
            }
            pos += n;
        }
    }

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        if (aligned(offset, src, writeAlignment)) {
            lockShared();
            try {
                writeFully(offset, src);
            } finally {
                unlockShared();
            }
        } else {
            writeUnaligned(offset, src);
        }
        if (fua) channel.force(false);
    }

    @Override
    public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        boolean vectored = writevFd >= 0;
        long pos = offset;
        for (ByteBuffer b : srcs) {
            vectored &= b.isDirect() && aligned(pos, b, writeAlignment);
            pos += b.remaining();
        }
        if (!vectored) {
            Backend.super.write(offset, srcs, fua);
            return;
        }
        lockShared();
        try {
            NativeIo.pwritevFully(writevFd, srcs, offset);
        } finally {
            unlockShared();
        }
        if (fua) channel.force(false);
    }

    private void writeFully(long offset, ByteBuffer src) throws IOException {
        if (writevFd >= 0 && src.isDirect()) {
            NativeIo.pwriteFully(writevFd, src, offset); // a failure keeps its errno (ENOSPC is not EIO)
            return;
        }
        long pos = offset;
        while (src.hasRemaining()) pos += channel.write(src, pos);
    }

    private void lockShared() {
        blockLock.shared().lock();
    }

    private void unlockShared() {
        blockLock.shared().unlock();
    }

    /** Read-modify-write of the covering aligned blocks, alone: no other change may interleave (see blockLock). */
    private void writeUnaligned(long offset, ByteBuffer src) throws IOException {
        long start = offset - offset % alignment;
        long end = roundUp(offset + src.remaining());
        blockLock.exclusive().lock();
        try (Arena arena = Arena.ofConfined()) {
            ByteBuffer bounce = arena.allocate(end - start, alignment).asByteBuffer();
            readFully(start, bounce.duplicate());
            bounce.position((int) (offset - start));
            bounce.put(src);
            bounce.clear();
            writeFully(start, bounce);
            // The last block of a file whose size is not aligned was written whole; cut the excess.
            if (end > size && !blockDevice) channel.truncate(size);
        } finally {
            blockLock.exclusive().unlock();
        }
    }

    @Override
    public void flush() throws IOException {
        channel.force(false);
    }

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        if (nativeFd >= 0) {
            lockShared();
            try {
                NativeIo.fallocate(nativeFd, NativeIo.FALLOC_FL_PUNCH_HOLE | NativeIo.FALLOC_FL_KEEP_SIZE, offset, length);
            } catch (NativeIo.ErrnoException e) {
                if (e.errno() != Errno.EOPNOTSUPP) throw e;
                // Trim is advisory: a filesystem that cannot punch holes keeps the data.
            } finally {
                unlockShared();
            }
        }
        if (fua) channel.force(false);
    }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        if (!zeroNatively(offset, length, mayTrim)) {
            if (fast) throw new NbdErrorException(Nbd.ENOTSUP, "this file cannot zero a range faster than writing it");
            writeZeroes(offset, length);
        }
        if (fua) channel.force(false);
    }

    private boolean zeroNatively(long offset, long length, boolean mayTrim) throws IOException {
        if (nativeFd < 0) return false;
        // Not held around the writeZeroes fallback: a read lock cannot be upgraded for its read-modify-writes.
        lockShared();
        try {
            return fallocateZeroes(offset, length, mayTrim);
        } finally {
            unlockShared();
        }
    }

    private boolean fallocateZeroes(long offset, long length, boolean mayTrim) throws IOException {
        int[] modes = mayTrim
            ? new int[] {NativeIo.FALLOC_FL_PUNCH_HOLE | NativeIo.FALLOC_FL_KEEP_SIZE, NativeIo.FALLOC_FL_ZERO_RANGE | NativeIo.FALLOC_FL_KEEP_SIZE}
            : new int[] {NativeIo.FALLOC_FL_ZERO_RANGE | NativeIo.FALLOC_FL_KEEP_SIZE};
        for (int m : modes) {
            try {
                NativeIo.fallocate(nativeFd, m, offset, length);
                return true;
            } catch (NativeIo.ErrnoException e) {
                if (e.errno() != Errno.EOPNOTSUPP && e.errno() != Errno.EINVAL) throw e;
            }
        }
        return false;
    }

    private void writeZeroes(long offset, long length) throws IOException {
        long pos = offset, end = offset + length;
        while (pos < end) {
            int n = (int) Math.min(ZERO_CHUNK, end - pos);
            ByteBuffer z = zeroes.duplicate().limit(n);
            write(pos, z, false);
            pos += n;
        }
    }

    @Override
    public void cache(long offset, long length) throws IOException {
        if (nativeFd >= 0 && mode == Mode.CACHED) NativeIo.fadvise(nativeFd, offset, length, NativeIo.POSIX_FADV_WILLNEED);
    }

    @Override
    public List<Extent> extents(long offset, long length) throws IOException {
        if (nativeFd < 0) return Backend.super.extents(offset, length);
        List<Extent> out = new ArrayList<>();
        long end = offset + length, pos = offset;
        try {
            while (pos < end && out.size() < MAX_EXTENTS) {
                long data = NativeIo.lseek(nativeFd, pos, NativeIo.SEEK_DATA);
                if (data < 0 || data >= end) {
                    out.add(new Extent(end - pos, true, true));
                    break;
                }
                if (data > pos) {
                    out.add(new Extent(data - pos, true, true));
                    pos = data;
                    continue;
                }
                long hole = NativeIo.lseek(nativeFd, pos, NativeIo.SEEK_HOLE);
                long stop = hole < 0 ? end : Math.min(hole, end);
                if (stop <= pos) stop = end; // a filesystem that reports nonsense: call the rest data
                out.add(new Extent(stop - pos, false, false));
                pos = stop;
            }
        } catch (NativeIo.ErrnoException e) {
            if (out.isEmpty()) return Backend.super.extents(offset, length);
        }
        return out;
    }

    @Override
    public void close() throws IOException {
        try {
            if (!readOnly) channel.force(true);
        } finally {
            channel.close();
            if (writevFd >= 0 && writevFd != nativeFd) NativeIo.close(writevFd);
            if (nativeFd >= 0) NativeIo.close(nativeFd);
            blockLock.close();
        }
    }
}
