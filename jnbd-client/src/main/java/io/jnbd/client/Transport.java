package io.jnbd.client;

import io.jnbd.tls.RawChannel;
import io.jnbd.tls.SecureChannel;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

/**
 * The byte stream of one connection, under its handshake, sender and receiver. A plain connection calls its
 * blocking socket directly, making the same system calls it made before there was TLS, from a final class
 * the JIT inlines; after STARTTLS the same bytes go through a {@link SecureChannel} over that socket.
 *
 * <p>One thread may read while another writes, and neither call is made by two threads at once (a connection
 * has one reader thread, and its sender writes under a lock): that is all a SecureChannel allows.
 */
abstract sealed class Transport permits Transport.Plain, Transport.Tls {

    final SocketChannel socket;

    private Transport(SocketChannel socket) {
        this.socket = socket;
    }

    static Transport plain(SocketChannel socket) {
        return new Plain(socket);
    }

    /** Reads at least one byte into {@code dst} (which must have room), waiting for it; -1 at end of stream. */
    abstract int read(ByteBuffer dst) throws IOException;

    /** Writes every remaining byte of {@code src}. */
    abstract void write(ByteBuffer src) throws IOException;

    /** Writes every remaining byte of {@code header}, then of {@code payload}: a request and its data. */
    abstract void write(ByteBuffer header, ByteBuffer payload) throws IOException;

    /**
     * Ends the stream politely after the last write: TLS sends its close_notify, so the server sees a clean end
     * rather than a truncated session. Only by the thread allowed to write.
     */
    void endWrites() {
    }

    /** The negotiated TLS protocol and cipher suite, or null over a plain connection. */
    String tls() {
        return null;
    }

    /** Closes the socket, which also ends a read or write blocked in it on another thread. */
    final void close() {
        try {
            socket.close();
        } catch (IOException ignored) {
            // Nothing more to do with a broken socket.
        }
    }

    /** The socket, for TLS to run its handshake and records over. */
    final RawChannel raw() {
        return new RawChannel() {
            @Override
            public int read(ByteBuffer dst) throws IOException {
                return socket.read(dst);
            }

            @Override
            public void write(ByteBuffer src) throws IOException {
                while (src.hasRemaining()) socket.write(src);
            }
        };
    }

    static final class Plain extends Transport {
        Plain(SocketChannel socket) {
            super(socket);
        }

        @Override
        int read(ByteBuffer dst) throws IOException {
            return socket.read(dst);
        }

        @Override
        void write(ByteBuffer src) throws IOException {
            while (src.hasRemaining()) socket.write(src);
        }

        @Override
        void write(ByteBuffer header, ByteBuffer payload) throws IOException {
            // One gathering write (writev) for both, repeated only if the socket took part of them.
            ByteBuffer[] both = {header, payload};
            while (payload.hasRemaining()) socket.write(both);
        }
    }

    static final class Tls extends Transport {
        private final SecureChannel session;

        Tls(SocketChannel socket, SecureChannel session) {
            super(socket);
            this.session = session;
        }

        @Override
        int read(ByteBuffer dst) throws IOException {
            return session.read(dst);
        }

        @Override
        void write(ByteBuffer src) throws IOException {
            session.write(src);
        }

        @Override
        void write(ByteBuffer header, ByteBuffer payload) throws IOException {
            session.write(header, payload);
        }

        @Override
        void endWrites() {
            session.close();
        }

        @Override
        String tls() {
            return session.description();
        }
    }
}
