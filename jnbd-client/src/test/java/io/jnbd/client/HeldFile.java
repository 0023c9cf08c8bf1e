package io.jnbd.client;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.ReadableByteChannel;
import java.nio.channels.WritableByteChannel;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * The payload of a file-backed write, held by the test: the client's sender sends it with {@code transferTo},
 * which here puts the bytes into the socket and then waits for {@link #letGo} before it returns (or, if
 * {@link #fail} is set, fails then instead). The sender is so kept in the middle of a write for as long as the
 * test likes. Only what the client calls is implemented.
 */
final class HeldFile extends FileChannel {

    private final byte[] content;
    private final boolean fail;
    private final CountDownLatch gate = new CountDownLatch(1);
    /** Counted down once the bytes are in the socket and the transfer waits at the gate. */
    final CountDownLatch sent = new CountDownLatch(1);

    HeldFile(byte[] content, boolean fail) {
        this.content = content;
        this.fail = fail;
    }

    void letGo() {
        gate.countDown();
    }

    @Override
    public long transferTo(long position, long count, WritableByteChannel target) throws IOException {
        ByteBuffer b = ByteBuffer.wrap(content, (int) position, (int) count);
        if (!fail) {
            while (b.hasRemaining()) target.write(b);
        }
        sent.countDown();
        try {
            // Bounded, so that a test that fails before letting go still ends.
            gate.await(60, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (fail) throw new IOException("the test's file went away");
        return count;
    }

    @Override
    public long size() {
        return content.length;
    }

    @Override
    public int read(ByteBuffer dst, long position) {
        throw new UnsupportedOperationException();
    }

    @Override
    public int read(ByteBuffer dst) {
        throw new UnsupportedOperationException();
    }

    @Override
    public long read(ByteBuffer[] dsts, int offset, int length) {
        throw new UnsupportedOperationException();
    }

    @Override
    public int write(ByteBuffer src) {
        throw new UnsupportedOperationException();
    }

    @Override
    public long write(ByteBuffer[] srcs, int offset, int length) {
        throw new UnsupportedOperationException();
    }

    @Override
    public int write(ByteBuffer src, long position) {
        throw new UnsupportedOperationException();
    }

    @Override
    public long position() {
        return 0;
    }

    @Override
    public FileChannel position(long newPosition) {
        throw new UnsupportedOperationException();
    }

    @Override
    public FileChannel truncate(long size) {
        throw new UnsupportedOperationException();
    }

    @Override
    public void force(boolean metaData) {
    }

    @Override
    public long transferFrom(ReadableByteChannel src, long position, long count) {
        throw new UnsupportedOperationException();
    }

    @Override
    public MappedByteBuffer map(MapMode mode, long position, long size) {
        throw new UnsupportedOperationException();
    }

    @Override
    public FileLock lock(long position, long size, boolean shared) {
        throw new UnsupportedOperationException();
    }

    @Override
    public FileLock tryLock(long position, long size, boolean shared) {
        throw new UnsupportedOperationException();
    }

    @Override
    protected void implCloseChannel() {
        gate.countDown();
    }
}
