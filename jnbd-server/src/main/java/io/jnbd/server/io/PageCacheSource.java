package io.jnbd.server.io;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;

/**
 * A file whose reads may skip the JVM: sent from the page cache to a socket (sendfile), or read on the connection's
 * own thread when the page cache already holds them. What a backend offers for zero copy; a filter passes it on only
 * if it keeps the zero-copy trait, since every read taken this way skips the filter's own {@code read}.
 *
 * <p>The native descriptor is for the transports in {@code net/} and for {@link NativeIo}; nothing above them
 * handles it.
 */
public final class PageCacheSource {
    private final FileChannel channel;
    private final int fd;

    /** {@code fd}: the channel's native descriptor, or -1 where the platform gives none (then the JDK's calls). */
    public PageCacheSource(FileChannel channel, int fd) {
        this.channel = java.util.Objects.requireNonNull(channel, "channel");
        this.fd = fd;
    }

    /**
     * Fills {@code dst} (a direct buffer, position to limit) from {@code offset} only if the page cache holds every
     * byte, without waiting for the disk; false, {@code dst} unchanged, otherwise.
     */
    public boolean readIfCached(ByteBuffer dst, long offset) throws IOException {
        return fd >= 0 && NativeIo.preadIfCached(fd, dst, offset);
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
