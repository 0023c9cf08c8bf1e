package io.jnbd.server.io;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.Optional;

/**
 * The Linux system calls the JDK lacks (fallocate, lseek SEEK_DATA/SEEK_HOLE, posix_fadvise), reached
 * through {@code java.lang.foreign}. Callers check {@link #AVAILABLE} and fall back to portable code when
 * it is false (another OS, an architecture {@link LinuxAbi} has no constants for, or a JVM started without
 * native access).
 *
 * <p>The calls act on a file descriptor of our own, opened beside the JDK's {@code FileChannel}: the
 * JDK does not expose its descriptor, and these calls depend only on the file, not on which descriptor
 * names it.
 */
public final class NativeIo {
    private NativeIo() {}

    /** The architecture's constants (see {@link LinuxAbi}); null keeps every call here off. */
    private static final LinuxAbi ABI = LinuxAbi.CURRENT;

    public static final int O_RDONLY = 0;
    public static final int O_RDWR = 2;
    private static final int O_CLOEXEC = ABI == null ? 0 : ABI.oCloexec();
    public static final int O_DIRECT = ABI == null ? 0 : ABI.oDirect();

    public static final int FALLOC_FL_KEEP_SIZE = 0x01;
    public static final int FALLOC_FL_PUNCH_HOLE = 0x02;
    public static final int FALLOC_FL_ZERO_RANGE = 0x10;

    public static final int SEEK_END = 2;
    public static final int SEEK_DATA = 3;
    public static final int SEEK_HOLE = 4;

    public static final int POSIX_FADV_WILLNEED = 3;
    public static final int POSIX_FADV_DONTNEED = 4;

    public static final int SYNC_FILE_RANGE_WAIT_BEFORE = 1;
    public static final int SYNC_FILE_RANGE_WRITE = 2;
    public static final int SYNC_FILE_RANGE_WAIT_AFTER = 4;


    private static final int PROT_READ_WRITE = 0x3;
    private static final int MAP_PRIVATE_ANONYMOUS = 0x02 | (ABI == null ? 0 : ABI.mapAnonymous());
    private static final int MADV_HUGEPAGE = 14;
    private static final int RWF_NOWAIT = 0x08;
    /** Per-thread scratch for preadv2 and pwritev of one buffer: an iovec and the errno capture, freed with the thread. */
    private static final ThreadLocal<MemorySegment[]> IOV_SCRATCH = ThreadLocal.withInitial(() -> {
        Arena arena = Arena.ofAuto();
        return new MemorySegment[] {arena.allocate(Libc.IOVEC), arena.allocate(Libc.CAPTURE_LAYOUT)};
    });

    /** Declared before AVAILABLE, whose probe links close with them. */
    private static final ValueLayout I = ValueLayout.JAVA_INT, L = ValueLayout.JAVA_LONG, A = ValueLayout.ADDRESS;

    /**
     * Every function is linked on first use, by a holder class of its own (the JVM initialises it once, under
     * its lock, and the JIT treats its handle as a constant): linking one costs a generated stub, 5-10 ms
     * at start-up, and a command uses few of them (`jnbd copy` to a file: open, sync_file_range,
     * posix_fadvise and close). Whether they can be linked at all is settled here, before any is needed:
     * every symbol present, and native access granted (close linked as the probe).
     */
    public static final boolean AVAILABLE = ABI != null && linkable();

    private static boolean linkable() {
        try {
            return Libc.allFound("open", "close", "fallocate", "lseek", "posix_fadvise", "sync_file_range", "pwritev",
                "preadv2", "mmap", "munmap", "madvise") && Close.H != null;
        } catch (LinkageError | RuntimeException e) {
            return false; // no linker here, or no native access (--illegal-native-access=deny): portable code it is
        }
    }

    private static final class Open {
        static final MethodHandle H = Libc.withErrno("open", FunctionDescriptor.of(I, A, I, I), Linker.Option.firstVariadicArg(2));
    }

    private static final class Close {
        static final MethodHandle H = Libc.plain("close", FunctionDescriptor.of(I, I));
    }

    private static final class Fallocate {
        static final MethodHandle H = Libc.withErrno("fallocate", FunctionDescriptor.of(I, I, I, L, L));
    }

    private static final class Lseek {
        static final MethodHandle H = Libc.withErrno("lseek", FunctionDescriptor.of(L, I, L, I));
    }

    private static final class Fadvise {
        static final MethodHandle H = Libc.plain("posix_fadvise", FunctionDescriptor.of(I, I, L, L, I));
    }

    private static final class SyncFileRange {
        static final MethodHandle H = Libc.withErrno("sync_file_range", FunctionDescriptor.of(I, I, L, L, I));
    }

    private static final class Pwritev {
        static final MethodHandle H = Libc.withErrno("pwritev", FunctionDescriptor.of(L, I, A, I, L));
    }

    private static final class Preadv2 {
        static final MethodHandle H = Libc.withErrno("preadv2", FunctionDescriptor.of(L, I, A, I, L, I));
    }

    private static final class Mmap {
        static final MethodHandle H = Libc.plain("mmap", FunctionDescriptor.of(L, L, L, I, I, I, L));
    }

    private static final class Munmap {
        static final MethodHandle H = Libc.plain("munmap", FunctionDescriptor.of(I, L, L));
    }

    private static final class Madvise {
        static final MethodHandle H = Libc.plain("madvise", FunctionDescriptor.of(I, L, L, I));
    }

    /** A system call failed; {@code errno} says why. */
    public static final class ErrnoException extends IOException {
        private final int errno;

        ErrnoException(String call, int errno) {
            super(call + " failed: " + Errno.describe(errno));
            this.errno = errno;
        }

        public int errno() {
            return errno;
        }
    }

    /** Opens a descriptor for the calls below, or returns empty when native calls are unavailable. */
    public static Optional<Integer> open(Path path, boolean writable) throws IOException {
        return open(path, writable, 0);
    }

    public static Optional<Integer> open(Path path, boolean writable, int extraFlags) throws IOException {
        if (!AVAILABLE) return Optional.empty();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Libc.CAPTURE_LAYOUT);
            int fd = (int) Open.H.invokeExact(state, arena.allocateFrom(path.toString()),
                (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | extraFlags, 0);
            if (fd < 0) throw new ErrnoException("open " + path, errno(state));
            return Optional.of(fd);
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("open " + path, t);
        }
    }

    public static void close(int fd) {
        try {
            int rc = (int) Close.H.invokeExact(fd);
        } catch (Throwable ignored) {
            // closing is best effort: the descriptor is gone either way
        }
    }

    public static void fallocate(int fd, int mode, long offset, long length) throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Libc.CAPTURE_LAYOUT);
            int rc = (int) Fallocate.H.invokeExact(state, fd, mode, offset, length);
            if (rc != 0) throw new ErrnoException("fallocate", errno(state));
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("fallocate", t);
        }
    }

    /** lseek; returns -1 with {@code ENXIO} mapped to -1 (no more data / offset past the end). */
    public static long lseek(int fd, long offset, int whence) throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Libc.CAPTURE_LAYOUT);
            long rc = (long) Lseek.H.invokeExact(state, fd, offset, whence);
            if (rc < 0) {
                int e = errno(state);
                if (e == Errno.ENXIO) return -1;
                throw new ErrnoException("lseek", e);
            }
            return rc;
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("lseek", t);
        }
    }

    public static void fadvise(int fd, long offset, long length, int advice) throws IOException {
        try {
            int rc = (int) Fadvise.H.invokeExact(fd, offset, length, advice);
            if (rc != 0) throw new ErrnoException("posix_fadvise", rc);
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("posix_fadvise", t);
        }
    }

    /** sync_file_range(2): starts and/or waits for writeback of the range, as {@code flags} say. */
    public static void syncFileRange(int fd, long offset, long length, int flags) throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Libc.CAPTURE_LAYOUT);
            int rc;
            do {
                rc = (int) SyncFileRange.H.invokeExact(state, fd, offset, length, flags);
            } while (rc != 0 && errno(state) == Errno.EINTR);
            if (rc != 0) throw new ErrnoException("sync_file_range", errno(state));
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("sync_file_range", t);
        }
    }

    /**
     * Writes the direct buffer {@code src} (position to limit) at {@code offset}, advancing its position. Unlike
     * {@link java.nio.channels.FileChannel#write(ByteBuffer, long)}, a failure carries its errno, so a full
     * disk can be told from a broken one.
     */
    public static void pwriteFully(int fd, ByteBuffer src, long offset) throws IOException {
        MemorySegment[] scratch = IOV_SCRATCH.get();
        MemorySegment iov = scratch[0], state = scratch[1];
        long pos = offset;
        try {
            while (src.hasRemaining()) {
                MemorySegment from = MemorySegment.ofBuffer(src);
                iov.set(ValueLayout.ADDRESS, 0, from);
                iov.set(ValueLayout.JAVA_LONG, ValueLayout.ADDRESS.byteSize(), from.byteSize());
                long n = (long) Pwritev.H.invokeExact(state, fd, iov, 1, pos);
                if (n < 0) {
                    int e = errno(state);
                    if (e == Errno.EINTR) continue;
                    throw new ErrnoException("pwrite", e);
                }
                src.position(src.position() + (int) n);
                pos += n;
            }
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("pwrite", t);
        }
    }

    /**
     * Writes the direct buffers {@code srcs} (position to limit) one after another at {@code offset} with
     * as few pwritev calls as the kernel allows; advances each buffer's position.
     */
    public static void pwritevFully(int fd, ByteBuffer[] srcs, long offset) throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Libc.CAPTURE_LAYOUT);
            MemorySegment iov = arena.allocate(Libc.IOVEC, srcs.length);
            int first = 0;
            long pos = offset;
            while (first < srcs.length) {
                int n = 0;
                for (int i = first; i < srcs.length && n < 1024; i++, n++) {
                    ByteBuffer b = srcs[i];
                    MemorySegment seg = MemorySegment.ofBuffer(b);
                    iov.setAtIndex(ValueLayout.ADDRESS, 2L * n, seg);
                    iov.setAtIndex(ValueLayout.JAVA_LONG, 2L * n + 1, seg.byteSize());
                }
                long written = (long) Pwritev.H.invokeExact(state, fd, iov, n, pos);
                if (written < 0) throw new ErrnoException("pwritev", errno(state));
                pos += written;
                while (written > 0 && first < srcs.length) {
                    ByteBuffer b = srcs[first];
                    int step = (int) Math.min(written, b.remaining());
                    b.position(b.position() + step);
                    written -= step;
                    if (!b.hasRemaining()) first++;
                }
                while (first < srcs.length && !srcs[first].hasRemaining()) first++;
            }
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("pwritev", t);
        }
    }

    /**
     * Reads into {@code dst} (a direct buffer, position to limit) only if the page cache holds every byte:
     * preadv2 with RWF_NOWAIT. Returns true and fills {@code dst} on success; false, with {@code dst}
     * unchanged, when the read would wait for the disk or came up short.
     */
    public static boolean preadIfCached(int fd, ByteBuffer dst, long offset) throws IOException {
        long n = preadv2(fd, dst, offset, RWF_NOWAIT);
        if (n == dst.remaining()) {
            dst.position(dst.limit());
            return true;
        }
        if (n < 0) {
            int e = (int) -n;
            if (e == Errno.EAGAIN || e == Errno.EOPNOTSUPP || e == Errno.EINTR) return false;
            throw new ErrnoException("preadv2", e);
        }
        return false; // partly cached: let the ordinary path read it all
    }

    /**
     * Fills {@code dst} (a direct buffer, position to limit) from {@code offset} with plain preads, for a file whose
     * pages live in memory (tmpfs, ramfs), where no read waits for a device and the kernel refuses
     * {@link #preadIfCached}'s RWF_NOWAIT. True when full; false at the end of the file, {@code dst}'s position
     * unchanged.
     */
    public static boolean preadFromMemory(int fd, ByteBuffer dst, long offset) throws IOException {
        int start = dst.position();
        long pos = offset;
        while (dst.hasRemaining()) {
            int n = pread(fd, dst, pos);
            if (n == 0) {
                dst.position(start);
                return false;
            }
            pos += n;
        }
        return true;
    }

    /**
     * One pread into {@code dst} (a direct buffer, position to limit), waiting for the disk if it must; advances
     * its position. Returns the bytes read, 0 at the end of the file; a failure carries its errno.
     */
    public static int pread(int fd, ByteBuffer dst, long offset) throws IOException {
        while (true) {
            long n = preadv2(fd, dst, offset, 0);
            if (n >= 0) {
                dst.position(dst.position() + (int) n);
                return (int) n;
            }
            if (n != -Errno.EINTR) throw new ErrnoException("pread", (int) -n);
        }
    }

    /** One preadv2 into {@code dst}'s remaining bytes, its position left alone: the bytes read, or minus the errno. */
    private static long preadv2(int fd, ByteBuffer dst, long offset, int flags) throws IOException {
        MemorySegment[] scratch = IOV_SCRATCH.get();
        MemorySegment iov = scratch[0], state = scratch[1];
        MemorySegment target = MemorySegment.ofBuffer(dst);
        iov.set(ValueLayout.ADDRESS, 0, target);
        iov.set(ValueLayout.JAVA_LONG, ValueLayout.ADDRESS.byteSize(), target.byteSize());
        try {
            long n = (long) Preadv2.H.invokeExact(state, fd, iov, 1, offset, flags);
            return n >= 0 ? n : -errno(state);
        } catch (Throwable t) {
            throw new IOException("preadv2", t);
        }
    }

    /**
     * Maps {@code length} bytes of zeroed anonymous memory at an address that is a multiple of
     * {@code alignment} (a power of two), asks for transparent huge pages on it, and ties it to
     * {@code arena}: closing the arena unmaps it. Returns null when the mapping fails; the caller then
     * allocates as usual. Huge pages are only asked for: where the kernel has none to give, or
     * transparent huge pages are off, the memory is ordinary pages and works the same.
     */
    public static MemorySegment mapAligned(long length, long alignment, Arena arena) {
        if (!AVAILABLE) return null;
        try {
            long span = length + alignment;
            long base = (long) Mmap.H.invokeExact(0L, span, PROT_READ_WRITE, MAP_PRIVATE_ANONYMOUS, -1, 0L);
            if (base == -1L) return null;
            long start = (base + alignment - 1) & -alignment;
            // Only [start, start + length) is kept: what the over-sized mapping had either side goes back.
            if (start > base) unmap(base, start - base);
            if (base + span > start + length) unmap(start + length, base + span - start - length);
            try {
                int advised = (int) Madvise.H.invokeExact(start, length, MADV_HUGEPAGE); // failure is harmless, see above
                return MemorySegment.ofAddress(start).reinterpret(length, arena, s -> unmap(s.address(), length));
            } catch (Throwable t) {
                unmap(start, length);
                return null;
            }
        } catch (Throwable t) {
            return null;
        }
    }

    private static void unmap(long address, long length) {
        try {
            int rc = (int) Munmap.H.invokeExact(address, length);
        } catch (Throwable ignored) {
            // munmap of a range we mapped cannot fail short of a bug; nothing useful to do if it did
        }
    }

    private static int errno(MemorySegment state) {
        return Libc.errno(state);
    }
}
