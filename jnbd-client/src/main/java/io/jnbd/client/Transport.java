package io.jnbd.client;

import io.jnbd.tls.RawChannel;
import io.jnbd.tls.SecureChannel;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
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

    /** Writes every remaining byte of each of {@code srcs}, in order: several requests in one go. */
    abstract void write(ByteBuffer[] srcs) throws IOException;

    /**
     * Writes every remaining byte of {@code header}, then {@code length} bytes of {@code file} from
     * {@code position}. Fails if the file ends first; the connection is then unusable, as after any failed write.
     */
    abstract void write(ByteBuffer header, FileChannel file, long position, long length) throws IOException;

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

    /**
     * Closes the socket, which also ends a read or write blocked in it on another thread: the JDK's own calls
     * through close, a splice (which the JDK does not know about) through the shutdown.
     */
    final void close() {
        closing();
        try {
            socket.shutdownInput();
            socket.shutdownOutput();
        } catch (IOException | RuntimeException ignored) {
            // Not connected any more: nothing to wake.
        }
        beforeRelease();
        try {
            socket.close();
        } catch (IOException ignored) {
            // Nothing more to do with a broken socket.
        }
    }

    /** Whether a virtual thread may write on this transport without the JDK switching the socket's mode. */
    boolean writesFromVirtualThreads() {
        return false;
    }

    void closing() {
    }

    /** Between the shutdown, which ends native calls under way, and the close, which frees the descriptor. */
    void beforeRelease() {
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
        /** Made on the first write by a virtual thread; null without native access. */
        private volatile NativeSend nativeSend;
        private volatile boolean nativeTried;
        /**
         * Native writes under way. The JDK knows nothing of them, so its close would free the descriptor under
         * them, and a later call could write into whatever file reuses the number: close waits for them to end.
         */
        private final java.util.concurrent.atomic.AtomicInteger nativeWriters = new java.util.concurrent.atomic.AtomicInteger();
        private volatile boolean closing;

        Plain(SocketChannel socket) {
            super(socket);
        }

        @Override
        int read(ByteBuffer dst) throws IOException {
            return socket.read(dst);
        }

        @Override
        boolean writesFromVirtualThreads() {
            if (!nativeTried) {
                synchronized (this) {
                    if (!nativeTried) {
                        nativeSend = NativeSend.of(socket);
                        nativeTried = true;
                    }
                }
            }
            return nativeSend != null;
        }

        /** The native writer when the calling thread is virtual (and it is to be had), else null. */
        private NativeSend nativeFor() {
            return Thread.currentThread().isVirtual() && writesFromVirtualThreads() ? nativeSend : null;
        }

        private void writeNatively(NativeSend n, ByteBuffer... srcs) throws IOException {
            nativeWriters.incrementAndGet();
            try {
                if (closing) throw new java.nio.channels.ClosedChannelException();
                n.writeFully(srcs);
            } finally {
                nativeWriters.decrementAndGet();
            }
        }

        @Override
        void closing() {
            closing = true;
        }

        @Override
        void beforeRelease() {
            // The shutdown has made any sendmsg or poll under way return; they end within microseconds.
            long deadline = System.nanoTime() + 1_000_000_000L;
            while (nativeWriters.get() > 0 && System.nanoTime() < deadline) Thread.onSpinWait();
        }

        @Override
        void write(ByteBuffer src) throws IOException {
            NativeSend n = nativeFor();
            if (n != null) {
                writeNatively(n, src);
                return;
            }
            while (src.hasRemaining()) socket.write(src);
        }

        @Override
        void write(ByteBuffer header, ByteBuffer payload) throws IOException {
            NativeSend n = nativeFor();
            if (n != null) {
                writeNatively(n, header, payload);
                return;
            }
            // One gathering write (writev) for both, repeated only if the socket took part of them.
            ByteBuffer[] both = {header, payload};
            while (payload.hasRemaining()) socket.write(both);
        }

        @Override
        void write(ByteBuffer[] srcs) throws IOException {
            NativeSend n = nativeFor();
            if (n != null) {
                writeNatively(n, srcs);
                return;
            }
            ByteBuffer last = srcs[srcs.length - 1];
            while (last.hasRemaining()) socket.write(srcs);
        }

        @Override
        void write(ByteBuffer header, FileChannel file, long position, long length) throws IOException {
            while (header.hasRemaining()) socket.write(header);
            // transferTo is sendfile(2) here: the kernel hands page-cache pages to the socket, with no copy
            // into or out of this process.
            for (long done = 0; done < length; ) {
                long n = file.transferTo(position + done, length - done, socket);
                if (n <= 0) throw new EOFException("file ended at " + (position + done) + " with " + (length - done) + " bytes still to send");
                done += n;
            }
        }
    }

    static final class Tls extends Transport {
        private final SecureChannel session;
        /** For payloads read from a file; only the sender writes, under its lock. */
        private ByteBuffer scratch;

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
        void write(ByteBuffer[] srcs) throws IOException {
            for (ByteBuffer b : srcs) session.write(b);
        }

        @Override
        void write(ByteBuffer header, FileChannel file, long position, long length) throws IOException {
            // The records are encrypted here, so the bytes must pass through this process: a piece at a time.
            if (scratch == null) scratch = ByteBuffer.allocateDirect(256 * 1024);
            session.write(header);
            for (long done = 0; done < length; ) {
                scratch.clear().limit((int) Math.min(scratch.capacity(), length - done));
                while (scratch.hasRemaining()) {
                    if (file.read(scratch, position + done + scratch.position()) < 0) {
                        throw new EOFException("file ended at " + (position + done + scratch.position()));
                    }
                }
                scratch.flip();
                done += scratch.remaining();
                session.write(scratch);
            }
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
