package io.jnbd.cli;

import io.jnbd.server.io.NativeIo;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/**
 * Keeps a copy's writes to a local file from piling up in the page cache. Left alone, Linux lets gigabytes of
 * dirty pages collect, then throttles the writer and leaves the bulk of the writing to the final fsync: a
 * 4 GiB download spent 10-15 s of system time and finished no sooner than the disk allowed anyway. Here each
 * written range is handed to writeback at once ({@code sync_file_range(WRITE)}); once {@link #WINDOW} newer
 * ranges have followed it, the writer waits for it to reach the disk and drops it from the cache
 * ({@code POSIX_FADV_DONTNEED}), so the cache holds a few dozen MiB of the copy and the disk is busy from the
 * start. nbdcopy does the same (its "evict writes"); Linus Torvalds described the pattern on the kernel list.
 *
 * <p>The writes themselves, and those waits, run on a thread of their own: made on the source connections'
 * reader threads, a wait for the disk stopped those connections' replies from being read, and the 4 GiB
 * download ran at 359 MiB/s against nbdcopy's 520.
 */
final class WriteBehind implements AutoCloseable {

    /** Ranges written and not yet waited for. With copy's 1 MiB chunks, 32 MiB of writeback in flight. */
    static final int WINDOW = 32;

    private final int fd;
    private final ArrayDeque<long[]> inFlight = new ArrayDeque<>();
    private final ExecutorService writer = Executors.newSingleThreadExecutor(
        r -> Thread.ofPlatform().daemon().name("jnbd-file-writer").unstarted(r));

    private WriteBehind(int fd) {
        this.fd = fd;
    }

    /** For the regular file at {@code path}; null where the system calls are not available. */
    static WriteBehind open(Path path) {
        if (!NativeIo.AVAILABLE) return null;
        try {
            return NativeIo.open(path, true).map(WriteBehind::new).orElse(null);
        } catch (IOException e) {
            return null;
        }
    }

    /**
     * Writes {@code src} (position to limit) at {@code offset} of {@code channel} on the writer thread; on
     * success its position has reached the limit. The buffer must be left alone until the future completes.
     */
    CompletableFuture<Void> write(FileChannel channel, long offset, ByteBuffer src) {
        return CompletableFuture.runAsync(() -> {
            try {
                int n = src.remaining();
                Disk.Local.writeFully(channel, offset, src);
                written(offset, n);
            } catch (IOException e) {
                throw new CompletionException(e);
            }
        }, writer);
    }

    /** After {@code length} bytes were written at {@code offset}: starts their writeback, settles the oldest. */
    void written(long offset, long length) throws IOException {
        NativeIo.syncFileRange(fd, offset, length, NativeIo.SYNC_FILE_RANGE_WRITE);
        long[] oldest;
        synchronized (inFlight) {
            inFlight.addLast(new long[]{offset, length});
            oldest = inFlight.size() > WINDOW ? inFlight.pollFirst() : null;
        }
        // Outside the lock: the other writers go on while this one waits for the disk.
        if (oldest != null) settle(oldest[0], oldest[1]);
    }

    private void settle(long offset, long length) throws IOException {
        NativeIo.syncFileRange(fd, offset, length, NativeIo.SYNC_FILE_RANGE_WAIT_BEFORE
            | NativeIo.SYNC_FILE_RANGE_WRITE | NativeIo.SYNC_FILE_RANGE_WAIT_AFTER);
        NativeIo.fadvise(fd, offset, length, NativeIo.POSIX_FADV_DONTNEED);
    }

    @Override
    public void close() {
        writer.shutdown();
        try {
            // A copy waits for every write before it closes; this only covers one that failed part way.
            writer.awaitTermination(1, TimeUnit.MINUTES);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        NativeIo.close(fd);
    }
}
