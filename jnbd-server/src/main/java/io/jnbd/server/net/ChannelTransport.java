package io.jnbd.server.net;

import io.jnbd.server.io.PageCacheSource;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

/**
 * A blocking JDK channel, for where native calls are not available (another OS, no native access). The JDK
 * parks a virtual thread blocked on it. It cannot receive or send without waiting, so replies queue for the
 * connection's sender and payloads are read as they come; {@link #awaitReadable} receives one byte ahead and
 * keeps it for the next receive.
 */
final class ChannelTransport implements Transport {
    private final SocketChannel channel;
    /** A byte received by awaitReadable and not yet handed out; position 1 while it holds one. */
    private final ByteBuffer ahead = ByteBuffer.allocate(1);
    private volatile long lastSent;

    ChannelTransport(SocketChannel channel) {
        this.channel = channel;
    }

    /** No TCP_NOTSENT_LOWAT without native calls: only the buffer's size. */
    @Override
    public void sizeSendQueue(int bufferBytes, int unsentLimit) {
        Transports.setSendBuffer(channel, bufferBytes);
    }

    @Override
    public int receive(ByteBuffer dst) throws IOException {
        if (!dst.hasRemaining()) return 0;
        if (ahead.position() == 1) {
            dst.put(ahead.flip());
            ahead.clear();
            return 1;
        }
        return channel.read(dst);
    }

    @Override
    public int receiveNow(ByteBuffer dst) throws IOException {
        return receive(dst);
    }

    @Override
    public boolean awaitReadable(long timeoutMillis) throws IOException {
        if (ahead.position() == 1) return true;
        int n = channel.read(ahead);
        if (n < 0) ahead.clear(); // end of stream: the next receive reports it
        return true;
    }

    @Override
    public int pending() {
        return -1;
    }

    @Override
    public void lowWater(int bytes) {
        // not available: the receiver is woken for every arrival
    }

    @Override
    public boolean canWaitForArrival() {
        return false;
    }

    @Override
    public boolean canSendNow() {
        return false;
    }

    @Override
    public boolean zeroCopyFiles() {
        return false; // sendFile goes through a bounce buffer
    }

    @Override
    public void send(ByteBuffer... srcs) throws IOException {
        long left = 0;
        for (ByteBuffer b : srcs) left += b.remaining();
        while (left > 0) {
            long n = channel.write(srcs);
            if (n > 0) lastSent = System.nanoTime();
            left -= n;
        }
    }

    @Override
    public long lastSentNanos() {
        return lastSent;
    }

    @Override
    public long sendNow(ByteBuffer... srcs) {
        return 0;
    }

    @Override
    public void sendFile(ByteBuffer header, PageCacheSource file, long position, long length) throws IOException {
        Transports.copyFile(this, header, file.channel(), position, length);
    }

    @Override
    public void shutdownInput() {
        Transports.shutdown(channel, true);
    }

    @Override
    public void shutdown() {
        shutdownInput();
        Transports.shutdown(channel, false);
    }

    @Override
    public void close() {
        Transports.closeQuietly(channel);
    }
}
