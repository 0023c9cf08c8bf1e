package io.jnbd.cli;

import io.jnbd.client.Extent;
import io.jnbd.client.ReadSink.Payload;
import io.jnbd.client.ReadSink;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.Semaphore;
import java.util.function.LongConsumer;

/**
 * The requests of one {@code jnbd copy} in flight: a bound on how many, their buffers, and how each chunk moves (read
 * and written through this process, sent from a local file's page cache, or spliced from socket to socket). What
 * is copied where is {@link CopyCommand}'s to say: the whole disk ({@link #copyAll}) or the dirty ranges of a bitmap
 * ({@link #copyRange}). Every chunk is counted in the copy's {@link CopyTally} as it starts and ends.
 */
final class CopyWindow {
    private final Disk src;
    private final Disk dst;
    private final int chunk;
    private final int size;
    private final Semaphore slots;
    private final boolean spliced;
    private final ChunkBuffers buffers;
    private final CopyTally tally;
    /** Told the bytes of each chunk done, for the progress bar. */
    private final LongConsumer copied;

    /**
     * {@code inFlight} chunks at most, of {@code requestSize} bytes rounded to both disks' block size; {@code splice}:
     * whether data between two servers may pass from socket to socket in the kernel, where both connections allow it.
     */
    CopyWindow(Disk src, Disk dst, int inFlight, int requestSize, boolean splice, CopyTally tally, LongConsumer copied) {
        this.src = src;
        this.dst = dst;
        int align = align(src, dst);
        this.chunk = Math.max(align, requestSize / align * align);
        this.size = Math.max(1, inFlight);
        this.slots = new Semaphore(size);
        this.spliced = splice && src instanceof Disk.Remote a && dst instanceof Disk.Remote b && a.client().canSpliceTo(b.client());
        this.buffers = new ChunkBuffers(chunk);
        this.tally = tally;
        this.copied = copied;
    }

    /** The block size both disks accept: every chunk starts and ends on it (but a disk's last). */
    static int align(Disk src, Disk dst) {
        return Math.max(src.blockSize(), dst.blockSize());
    }

    /**
     * The whole disk, {@code size} bytes: what the source reports as zeroes (block status) is zeroed on the
     * destination without being read, the rest copied. Returns once every request has ended.
     */
    void copyAll(long size) throws Exception {
        long offset = 0;
        while (offset < size && tally.failure() == null) {
            // Ask for status a stretch ahead; the source may answer for less, and we continue where it stopped.
            List<Extent> extents = src.extents(offset, Math.min(size - offset, 1L << 30));
            if (extents.isEmpty() || extents.getFirst().offset() != offset) {
                throw new IOException("block status of " + src.name() + " did not describe offset " + offset);
            }
            for (Extent e : extents) {
                if (tally.failure() != null) break;
                if (e.zero()) zero(e.offset(), e.length());
                else copyRange(e.offset(), e.end());
                offset = e.end();
            }
        }
        drain();
    }

    /** Copies {@code [start, end)} as data, a chunk per request, up to the window's bound in flight. */
    void copyRange(long start, long end) throws InterruptedException {
        for (long at = start; at < end && tally.failure() == null; ) {
            long pos = at;
            int n = (int) Math.min(chunk, end - at);
            slots.acquire();
            tally.started(pos, n);
            ChunkBuffers.Lease lease = buffers.lease(n);
            CompletableFuture<Void> f;
            try {
                f = spliced ? spliceChunk((Disk.Remote) src, (Disk.Remote) dst, pos, n, buffers, lease)
                    : copyChunk(src, dst, pos, n, buffers, lease);
            } catch (RuntimeException ex) {
                f = CompletableFuture.failedFuture(ex);
            }
            f.whenComplete((v, ex) -> {
                done(pos, n, ex);
                lease.release();
                slots.release();
            });
            at += n;
        }
    }

    /** Waits for every request in flight; each is bounded by the request timeout. */
    void drain() throws InterruptedException {
        slots.acquire(size);
        slots.release(size);
    }

    private void zero(long offset, long length) throws InterruptedException {
        slots.acquire();
        tally.started(offset, length);
        CompletableFuture<Void> f;
        try {
            f = dst.zero(offset, length);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete((v, ex) -> {
            done(offset, length, ex);
            slots.release();
        });
    }

    private void done(long offset, long length, Throwable error) {
        tally.finished(offset, length, error == null ? null : CopyCommand.unwrap(error));
        if (error == null) copied.accept(length);
    }

    /**
     * Copies one chunk of data. A chunk of a local file bound for an NBD export is sent by the kernel straight
     * from the page cache (sendfile) unless its first 4 KiB read as zeroes: data rarely starts so, and a chunk
     * that does is read whole and looked at like any other, so a run of zeroes still becomes WRITE_ZEROES.
     * Everything else is read into the chunk's buffer, and written unless it is all zeroes.
     */
    private static CompletableFuture<Void> copyChunk(Disk src, Disk dst, long pos, int n, ChunkBuffers buffers,
                                                     ChunkBuffers.Lease lease) {
        if (src instanceof Disk.Local file && dst instanceof Disk.Remote nbd) {
            ByteBuffer head = buffers.probe().limit(Math.min(n, ChunkBuffers.PROBE));
            CompletableFuture<Void> probe = src.read(pos, head); // a local file's read is done on return
            if (probe.isCompletedExceptionally()) return probe;
            if (!allZero(head.flip())) return nbd.client().write(pos, file.channel(), pos, n, false);
        }
        ByteBuffer buf = lease.get().limit(n);
        return src.read(pos, buf).thenCompose(v -> {
            buf.flip(); // the read advanced the position over the data
            return allZero(buf) ? dst.zero(pos, n) : dst.write(pos, buf);
        });
    }

    /**
     * Copies one chunk between two servers: each data chunk of the source's reply goes on to the destination as
     * a WRITE of its own whose payload the kernel splices from one socket to the other, unless its first 4 KiB
     * are zeroes (then it is read into the chunk's buffer and looked at whole, as {@link #copyChunk} does). Runs on the
     * source connection's reader thread; the result completes when the read and every write it made have.
     */
    private static CompletableFuture<Void> spliceChunk(Disk.Remote src, Disk.Remote dst, long pos, int n,
                                                       ChunkBuffers buffers, ChunkBuffers.Lease lease) {
        List<CompletableFuture<Void>> writes = Collections.synchronizedList(new ArrayList<>());
        CompletableFuture<Void> read = src.client().read(pos, n, new ReadSink() {
            @Override
            public void data(long offset, int length, Payload payload) throws IOException {
                ByteBuffer head = buffers.probe().limit(Math.min(length, ChunkBuffers.PROBE));
                payload.peek(head);
                if (!allZero(head.flip()) && dst.client().canWriteInOne(offset, length)) {
                    writes.add(payload.spliceTo(dst.client(), offset));
                    return;
                }
                ByteBuffer view = lease.get().slice((int) (offset - pos), length);
                payload.readFully(view.duplicate());
                writes.add(allZero(view) ? dst.zero(offset, length) : dst.write(offset, view));
            }

            @Override
            public void zeroes(long offset, long length) {
                writes.add(dst.zero(offset, length));
            }
        });
        // Every write is waited for, even after a failure: until they end, they still use the buffer.
        return read.handle((v, readError) -> readError).thenCompose(readError -> {
            CompletableFuture<?>[] all;
            synchronized (writes) {
                all = writes.toArray(CompletableFuture[]::new);
            }
            return CompletableFuture.allOf(all).handle((v, writeError) -> {
                Throwable e = readError != null ? readError : writeError;
                if (e != null) throw new CompletionException(CopyCommand.unwrap(e));
                return null;
            });
        });
    }

    private static boolean allZero(ByteBuffer buf) {
        MemorySegment s = MemorySegment.ofBuffer(buf);
        for (long at = 0; at < s.byteSize(); at += ZEROES.byteSize()) {
            long n = Math.min(ZEROES.byteSize(), s.byteSize() - at);
            if (s.asSlice(at, n).mismatch(ZEROES.asSlice(0, n)) != -1) return false;
        }
        return true;
    }

    /**
     * What a buffer is compared with, piece by piece. Small and off-heap; in this class rather than the command's,
     * because picocli loads every subcommand's class to build the command line and a static there is paid by every
     * jnbd process, the servers included.
     */
    private static final MemorySegment ZEROES = Arena.global().allocate(64 << 10);
}
