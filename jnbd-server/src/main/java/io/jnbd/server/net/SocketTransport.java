package io.jnbd.server.net;

import io.jnbd.server.io.PageCacheSource;
import io.jnbd.server.io.NativeSocket;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

/**
 * Plain TCP or Unix socket through native calls that never block: MSG_DONTWAIT sends and receives, sendfile
 * behind a MSG_MORE header, SO_RCVLOWAT, FIONREAD. When a call finds the socket full or empty, a virtual
 * thread parks in the {@link Poller}; a platform thread blocks in poll(2), which costs it one wake-up fewer.
 */
final class SocketTransport implements Transport {
    private final SocketChannel channel;
    private final int fd;
    private int lowWater = 1;
    private volatile long lastSent;

    /** {@code channel} must already be non-blocking, and {@code fd} its descriptor. */
    SocketTransport(SocketChannel channel, int fd) {
        this.channel = channel;
        this.fd = fd;
    }

    @Override
    public int receive(ByteBuffer dst) throws IOException {
        while (true) {
            int n = NativeSocket.receiveNow(fd, dst);
            if (n != 0 || !dst.hasRemaining()) return n;
            if (lowWater > 1) lowWater(1); // the mark is for awaitReadable; a receive takes any amount
            await(false, 0);
        }
    }

    @Override
    public int receiveNow(ByteBuffer dst) throws IOException {
        return NativeSocket.receiveNow(fd, dst);
    }

    @Override
    public boolean awaitReadable(long timeoutMillis) throws IOException {
        if (timeoutMillis == 0 && lowWater == 1) {
            // Waiting between requests: arming reports data that is already there, and a stale wake-up only
            // costs the caller an empty receive, cheaper than asking poll(2) first and after every wake-up.
            await(false, 0);
            return true;
        }
        long deadline = timeoutMillis > 0 ? System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMillis) : 0;
        while (true) {
            // A wake-up is only a hint (see Poller): ask the kernel whether the mark is reached.
            if (NativeSocket.poll(fd, false, 0)) return true;
            long left = deadline == 0 ? 0 : deadline - System.nanoTime();
            if (deadline != 0 && left <= 0) return false;
            await(false, left);
        }
    }

    @Override
    public int pending() throws IOException {
        return NativeSocket.bytesQueued(fd);
    }

    @Override
    public void lowWater(int bytes) throws IOException {
        if (bytes == lowWater) return;
        NativeSocket.setReceiveLowWater(fd, bytes);
        lowWater = bytes;
    }

    @Override
    public boolean canWaitForArrival() {
        return true;
    }

    @Override
    public boolean canSendNow() {
        return true;
    }

    @Override
    public boolean zeroCopyFiles() {
        return true;
    }

    @Override
    public void sizeSendQueue(int bufferBytes, int unsentLimit) {
        Transports.setSendBuffer(channel, bufferBytes);
        try {
            if (unsentLimit > 0) NativeSocket.setUnsentLimit(fd, unsentLimit);
        } catch (IOException ignored) {
            // not TCP (a Unix socket): nothing waits on a window there
        }
    }

    @Override
    public void send(ByteBuffer... srcs) throws IOException {
        int first = 0;
        while (true) {
            while (first < srcs.length && !srcs[first].hasRemaining()) first++;
            if (first == srcs.length) return;
            ByteBuffer[] rest = first == 0 ? srcs : java.util.Arrays.copyOfRange(srcs, first, srcs.length);
            if (sendNow(rest) == 0) await(true, 0);
        }
    }

    @Override
    public long sendNow(ByteBuffer... srcs) throws IOException {
        long n = NativeSocket.sendNow(fd, srcs);
        if (n > 0) lastSent = System.nanoTime();
        return n;
    }

    @Override
    public long lastSentNanos() {
        return lastSent;
    }

    @Override
    public void sendFile(ByteBuffer header, PageCacheSource file, long position, long length) throws IOException {
        int fileFd = file.fd();
        if (fileFd < 0) {
            Transports.copyFile(this, header, file.channel(), position, length);
            return;
        }
        long sent = 0;
        while (header.hasRemaining() || sent < length) {
            int headerLeft = header.remaining();
            long n = NativeSocket.sendFileNow(fd, header, fileFd, position + sent, length - sent);
            if (n > 0 || header.remaining() < headerLeft) lastSent = System.nanoTime();
            sent += n;
            if (n == 0 && (header.hasRemaining() || sent < length)) await(true, 0);
        }
    }

    /**
     * How many carriers may block in a short poll(2) at once (see await): at most half the CPUs, so that the
     * others keep running every other connection.
     */
    private static final Semaphore SHORT_WAITS = new Semaphore(Math.max(1, Runtime.getRuntime().availableProcessors() / 2));
    /** A wait this short or shorter is worth making on the carrier, and the longest such wait lasts. */
    private static final long SHORT_WAIT_NANOS = 1_000_000;
    /** How long this connection's last wait in each direction lasted: a streaming client's are short. */
    private long lastReadWait = Long.MAX_VALUE, lastWriteWait = Long.MAX_VALUE;

    /**
     * Parks a virtual thread in the poller; blocks a platform thread in poll(2). A park costs two wake-ups (the
     * poller thread, then a carrier) where a thread blocked in the kernel costs one, which shows when a
     * connection streams: 1M reads at QD8 wait for room in the socket four times per reply. So a connection
     * whose last wait was short waits the next time in poll(2) on its carrier, for at most a millisecond,
     * and only while a slot of SHORT_WAITS is free; a connection that waited long (an idle client) never does.
     */
    private void await(boolean write, long timeoutNanos) throws IOException {
        if (Thread.currentThread().isVirtual()) {
            long start = System.nanoTime();
            boolean ready = false;
            if ((write ? lastWriteWait : lastReadWait) <= SHORT_WAIT_NANOS && SHORT_WAITS.tryAcquire()) {
                try {
                    ready = NativeSocket.poll(fd, write, (int) (SHORT_WAIT_NANOS / 1_000_000));
                } finally {
                    SHORT_WAITS.release();
                }
            }
            if (!ready) (write ? Poller.WRITE : Poller.READ).await(fd, timeoutNanos);
            long took = System.nanoTime() - start;
            if (write) lastWriteWait = took;
            else lastReadWait = took;
        } else {
            int ms = timeoutNanos == 0 ? -1 : (int) Math.max(1, TimeUnit.NANOSECONDS.toMillis(timeoutNanos));
            NativeSocket.poll(fd, write, ms);
        }
        if (!channel.isOpen()) throw new EOFException("connection closed");
    }

    @Override
    public void shutdownInput() {
        Transports.shutdown(channel, true);
        Poller.READ.wake(fd);
    }

    @Override
    public void shutdown() {
        shutdownInput();
        Transports.shutdown(channel, false);
        Poller.WRITE.wake(fd);
    }

    @Override
    public void close() {
        Transports.closeQuietly(channel);
    }
}
