package io.jnbd.pool.memserver;

import static io.jnbd.pool.memserver.PageStore.PAGE;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The disk tier: one file of PAGE-sized slots with a free list. Like a RAM frame, a slot is only read or
 * written by a thread that holds the stripe lock of the page in it.
 *
 * <p>The file is sparse: a slot takes disk space when a page is first evicted into it. The free list grows
 * with the slots that have been freed rather than being sized for the capacity, so a large, mostly idle
 * spill tier costs no heap.
 */
final class SpillFile implements AutoCloseable {
    static final int NO_SLOT = -1;
    private static final Logger LOG = LoggerFactory.getLogger(SpillFile.class);
    /** For zeroing part of a spilled page; never written, so one buffer serves every thread. */
    private static final ByteBuffer ZEROES = ByteBuffer.allocateDirect(PAGE).asReadOnlyBuffer();

    private final Path path;
    private final FileChannel channel;
    private final int slots;
    private final AtomicInteger used = new AtomicInteger();

    private final ReentrantLock freeLock = new ReentrantLock();
    private int[] freeSlots = new int[64];
    private int freeCount;
    /** Slots below this have held a page; the rest were never written. */
    private int carved;

    private SpillFile(Path path, FileChannel channel, int slots) {
        this.path = path;
        this.channel = channel;
        this.slots = slots;
    }

    /** Creates a new file with a name of its own in {@code dir}, so that stores can share a directory. */
    static SpillFile create(Path dir, int slots) throws IOException {
        Path path = Files.createTempFile(dir, "jnbd-spill-", ".pages");
        try {
            FileChannel channel = FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE);
            makeUninterruptible(channel);
            return new SpillFile(path, channel, slots);
        } catch (IOException | RuntimeException e) {
            Files.deleteIfExists(path);
            throw e;
        }
    }

    /**
     * A thread interrupted during I/O on a FileChannel closes the channel for every thread, which here
     * would lose every spilled page of every client because one request was cancelled. The JDK's own
     * escape from that is internal; without {@code --add-exports java.base/sun.nio.ch=ALL-UNNAMED} (which
     * bin/jnbd passes) we can only say so.
     */
    private static void makeUninterruptible(FileChannel channel) {
        try {
            channel.getClass().getMethod("setUninterruptible").invoke(channel);
        } catch (ReflectiveOperationException | RuntimeException e) {
            LOG.warn("The spill file stays interruptible ({}): a thread interrupted during spill I/O would close it "
                + "for all clients. Run with --add-exports java.base/sun.nio.ch=ALL-UNNAMED.", e.toString());
        }
    }

    Path path() {
        return path;
    }

    int slots() {
        return slots;
    }

    /** Slots that hold a page, or are being written with one. */
    int used() {
        return used.get();
    }

    boolean hasFree() {
        return used.get() < slots;
    }

    int take() {
        freeLock.lock();
        try {
            int slot;
            if (freeCount > 0) slot = freeSlots[--freeCount];
            else if (carved < slots) slot = carved++;
            else return NO_SLOT;
            used.incrementAndGet();
            return slot;
        } finally {
            freeLock.unlock();
        }
    }

    void free(int slot) {
        freeLock.lock();
        try {
            if (freeCount == freeSlots.length) freeSlots = Arrays.copyOf(freeSlots, freeCount * 2);
            freeSlots[freeCount++] = slot;
            used.decrementAndGet();
        } finally {
            freeLock.unlock();
        }
    }

    void writePage(int slot, ByteBuffer page) throws IOException {
        write(slot, 0, page);
    }

    void readPage(int slot, ByteBuffer page) throws IOException {
        read(slot, 0, page);
    }

    /** Reads {@code dst.remaining()} bytes from {@code inPage} of the slot's page. */
    void read(int slot, int inPage, ByteBuffer dst) throws IOException {
        long position = offset(slot) + inPage;
        while (dst.hasRemaining()) {
            int n = channel.read(dst, position);
            if (n < 0) throw new EOFException("spill slot " + slot + " ends early in " + path);
            position += n;
        }
    }

    /** Writes {@code src.remaining()} bytes at {@code inPage} of the slot's page. */
    void write(int slot, int inPage, ByteBuffer src) throws IOException {
        long position = offset(slot) + inPage;
        while (src.hasRemaining()) position += channel.write(src, position);
    }

    void zero(int slot, int inPage, int length) throws IOException {
        write(slot, inPage, ZEROES.duplicate().limit(length));
    }

    private static long offset(int slot) {
        return (long) slot * PAGE;
    }

    /** Closes and deletes the file; the caller makes sure no thread is inside a slot. */
    @Override
    public void close() {
        try {
            channel.close();
        } catch (IOException e) {
            LOG.warn("Closing spill file {}: {}", path, e.toString());
        }
        try {
            Files.deleteIfExists(path);
        } catch (IOException e) {
            LOG.warn("Could not delete spill file {}: {}", path, e.toString());
        }
    }
}
