package io.jnbd.server.net;

import io.jnbd.server.io.NativeSocket;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.SocketChannel;

/** Makes the transport of an accepted socket, and the whole-message helpers every transport's user needs. */
public final class Transports {
    private Transports() {}

    /**
     * The plain transport for {@code channel}: native non-blocking calls where they are available (the
     * channel is switched to non-blocking mode for them), else the JDK's blocking channel.
     */
    public static Transport plain(SocketChannel channel) throws IOException {
        int fd = NativeSocket.fd(channel);
        if (fd < 0) return new ChannelTransport(channel);
        channel.configureBlocking(false);
        return new SocketTransport(channel, fd);
    }

    /**
     * Whether a connection woken for its socket is still waiting for a carrier thread: a carrier kept busy
     * meanwhile (spinning for a request that has not come) delays one that has.
     */
    public static boolean othersWaitingToRun() {
        return Poller.wokenWaiting();
    }

    /** Fills {@code dst}; false on a clean end of stream before its first byte, EOFException after it. */
    public static boolean receiveFully(Transport t, ByteBuffer dst) throws IOException {
        boolean any = false;
        while (dst.hasRemaining()) {
            int n = t.receive(dst);
            if (n < 0) {
                if (!any) return false;
                throw new EOFException("peer closed the connection in the middle of a message");
            }
            if (n > 0) any = true;
        }
        return true;
    }

    public static void receiveExactly(Transport t, ByteBuffer dst) throws IOException {
        if (!receiveFully(t, dst)) throw new EOFException("peer closed the connection");
    }

    /** The buffer a file range of {@code length} bytes is sent through when sendfile cannot: at most 256K. */
    static int pieceSize(long length) {
        return (int) Math.min(Math.max(length, 1), 256 << 10);
    }

    /** Sends {@code header} and a file range through a bounce buffer of its own, for transports without sendfile. */
    static void copyFile(Transport t, ByteBuffer header, FileChannel file, long position, long length) throws IOException {
        copyFile(t, header, file, position, length, ByteBuffer.allocateDirect(pieceSize(length)));
    }

    /**
     * Sends {@code header}, then the file range read piece by piece into {@code piece}; the header goes in the
     * same send as the first piece.
     */
    static void copyFile(Transport t, ByteBuffer header, FileChannel file, long position, long length, ByteBuffer piece) throws IOException {
        long pos = position, end = position + length;
        do {
            piece.clear().limit((int) Math.min(piece.capacity(), end - pos));
            while (piece.hasRemaining()) {
                if (file.read(piece, pos + piece.position()) < 0) throw new EOFException("file ended at " + pos + " while sending a read");
            }
            pos += piece.flip().remaining();
            t.send(header, piece);
        } while (pos < end);
    }

    /** Sets SO_SNDBUF if {@code bytes} is positive and the socket has it (a Unix socket may refuse). */
    static void setSendBuffer(SocketChannel channel, int bytes) {
        if (bytes <= 0) return;
        try {
            channel.setOption(java.net.StandardSocketOptions.SO_SNDBUF, bytes);
        } catch (IOException | UnsupportedOperationException ignored) {
            // an optimisation only
        }
    }

    /** Shuts one direction of {@code channel} down; one already shut down or closed is left as it is. */
    static void shutdown(SocketChannel channel, boolean input) {
        try {
            if (input) channel.shutdownInput();
            else channel.shutdownOutput();
        } catch (IOException ignored) {
            // already shut down or closed
        }
    }

    static void closeQuietly(AutoCloseable c) {
        try {
            c.close();
        } catch (Exception ignored) {
            // closing is best effort
        }
    }
}
