package io.jnbd.server.io;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;

/**
 * A file whose reads may skip the JVM: sent from the page cache to a socket (sendfile), or read on the connection's
 * own thread when the page cache already holds them. What a backend offers for zero copy; a filter passes it on only
 * if it keeps the zero-copy trait, since every read taken this way skips the filter's own {@code read}.
 *
 * <p>The native descriptor is for the transports in {@code net/} and for {@link NativeIo}; nothing above them
 * handles it.
 */
public final class PageCacheSource {
    /**
     * File systems whose files live in memory: their reads never wait for a device, and the kernel refuses the
     * RWF_NOWAIT that asks whether one would (EOPNOTSUPP on tmpfs), which would send every read of a base image
     * kept in RAM to the I/O pool.
     */
    private static final Set<String> IN_MEMORY = Set.of("tmpfs", "ramfs");

    private final FileChannel channel;
    private final int fd;
    private final boolean inMemory;

    /** {@code fd}: the channel's native descriptor, or -1 where the platform gives none (then the JDK's calls). */
    public PageCacheSource(FileChannel channel, int fd) {
        this(channel, fd, false);
    }

    private PageCacheSource(FileChannel channel, int fd, boolean inMemory) {
        this.channel = java.util.Objects.requireNonNull(channel, "channel");
        this.fd = fd;
        this.inMemory = inMemory;
    }

    /** The file at {@code path}, opened as {@code channel} and {@code fd}: on tmpfs or ramfs every read counts as cached. */
    public static PageCacheSource of(Path path, FileChannel channel, int fd) {
        return new PageCacheSource(channel, fd, inMemory(path));
    }

    /** Whether the file at {@code path} lives on a file system in memory (a swapped-out tmpfs page still waits: rare). */
    static boolean inMemory(Path path) {
        try {
            return IN_MEMORY.contains(Files.getFileStore(path).type());
        } catch (IOException | SecurityException e) {
            return false; // then RWF_NOWAIT decides, as for any file
        }
    }

    /** True when reads are taken from a file system in memory rather than asked of the page cache. */
    public boolean inMemory() {
        return inMemory;
    }

    /**
     * Fills {@code dst} (a direct buffer, position to limit) from {@code offset} only if the page cache holds every
     * byte, without waiting for the disk; false, {@code dst} unchanged, otherwise. A file in memory is always held.
     */
    public boolean readIfCached(ByteBuffer dst, long offset) throws IOException {
        if (fd < 0) return false;
        return inMemory ? NativeIo.preadFromMemory(fd, dst, offset) : NativeIo.preadIfCached(fd, dst, offset);
    }

    /** The file, for the JDK's own transfers. */
    public FileChannel channel() {
        return channel;
    }

    /** The native descriptor for sendfile, or -1: for the transports only. */
    public int fd() {
        return fd;
    }
}
