package io.jnbd.server.filter;

import io.jnbd.server.io.NativeIo;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * Where a cache keeps its blocks: a sparse temporary file, unlinked as soon as it is open (as nbdkit's is), so
 * nothing is left behind however the server ends. A block lives at its own offset in the export; positioned reads and
 * writes go straight between it and the request's buffers. Evicted blocks are punched out, so the file's allocation
 * follows what the cache holds.
 */
final class CacheFile implements AutoCloseable {
    private final FileChannel channel;
    /** A descriptor for hole punching, or -1 without native calls: then evicted blocks keep their space. */
    private final int fd;

    private CacheFile(FileChannel channel, int fd) {
        this.channel = channel;
        this.fd = fd;
    }

    static CacheFile create(Path dir) throws IOException {
        Path p = Files.createTempFile(dir, "jnbd-cache-", ".blocks"); // owner-only on POSIX
        try {
            FileChannel ch = FileChannel.open(p, StandardOpenOption.READ, StandardOpenOption.WRITE);
            int fd;
            try {
                fd = NativeIo.open(p, true).orElse(-1);
            } catch (IOException e) {
                ch.close();
                throw e;
            }
            return new CacheFile(ch, fd);
        } finally {
            Files.deleteIfExists(p);
        }
    }

    /** Fills {@code dst} (position to limit) with the bytes at {@code offset}. */
    void read(long offset, ByteBuffer dst) throws IOException {
        long pos = offset;
        while (dst.hasRemaining()) {
            int n = channel.read(dst, pos);
            if (n < 0) throw new EOFException("cache file ends at " + pos);
            pos += n;
        }
    }

    /** Writes {@code src} (position to limit) at {@code offset}. */
    void write(long offset, ByteBuffer src) throws IOException {
        long pos = offset;
        while (src.hasRemaining()) pos += channel.write(src, pos);
    }

    /** Gives the space of a range back to the filesystem; its bytes read as zeroes after. */
    void discard(long offset, long length) throws IOException {
        if (fd >= 0) NativeIo.fallocate(fd, NativeIo.FALLOC_FL_PUNCH_HOLE | NativeIo.FALLOC_FL_KEEP_SIZE, offset, length);
    }

    /** Bytes the file holds data in (its data extents, by SEEK_DATA/SEEK_HOLE), or -1 without native calls. */
    long dataBytes() throws IOException {
        if (fd < 0) return -1;
        long total = 0, pos = 0;
        while (true) {
            long data = NativeIo.lseek(fd, pos, NativeIo.SEEK_DATA);
            if (data < 0) return total;
            long hole = NativeIo.lseek(fd, data, NativeIo.SEEK_HOLE);
            if (hole < 0) return total;
            total += hole - data;
            pos = hole;
        }
    }

    @Override
    public void close() throws IOException {
        if (fd >= 0) NativeIo.close(fd);
        channel.close();
    }
}
