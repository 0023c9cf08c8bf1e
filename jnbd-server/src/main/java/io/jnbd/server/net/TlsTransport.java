package io.jnbd.server.net;

import io.jnbd.server.io.PageCacheSource;
import io.jnbd.server.io.BufferPool;
import io.jnbd.tls.SecureChannel;
import io.jnbd.tls.TlsException;
import io.jnbd.tls.TlsServer;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.ByteBuffer;
import java.util.List;

/**
 * A connection after STARTTLS: every byte is encrypted through its {@link SecureChannel}, over the plain
 * transport of the same socket.
 *
 * <p>What the plain transport does without waiting it cannot: whether decrypted bytes are ready is known only
 * once a whole record has arrived and been decrypted, and sending means encrypting first. So it reports
 * {@link #canWaitForArrival()} and {@link #canSendNow()} false, which turns busy polling and the raised
 * low-water mark off and sends replies through the connection's writer, and it receives ahead of the caller
 * what {@link #awaitReadable} had to decrypt to know that something came. Nor can it send a file without
 * reading it: {@link #zeroCopyFiles()} is false. Shutting down goes to the socket's transport, so that any
 * thread can still wake the connection.
 */
public final class TlsTransport implements Transport {
    private final Transport plain;
    private final RawTransportChannel raw;
    private final SecureChannel secure;
    private final BufferPool buffers;
    /** A byte that awaitReadable decrypted and not yet handed out; position 1 while it holds one. */
    private final ByteBuffer ahead = ByteBuffer.allocate(1);
    /** awaitReadable found the end of the stream: the next receive reports it. */
    private boolean endAhead;
    /** Set when this side shut the input down: what the session says after that is not the client's doing. */
    private volatile boolean inputShut;

    private TlsTransport(Transport plain, RawTransportChannel raw, SecureChannel secure, BufferPool buffers) {
        this.plain = plain;
        this.raw = raw;
        this.secure = secure;
        this.buffers = buffers;
    }

    /**
     * Runs the server side of the TLS handshake over {@code plain}, right after STARTTLS was acknowledged, and
     * returns the transport the connection goes on with. {@code buffers} lends the buffers of {@link #sendFile}.
     */
    public static TlsTransport accept(TlsServer context, Transport plain, String peer, BufferPool buffers) throws TlsException {
        RawTransportChannel raw = new RawTransportChannel(plain);
        return new TlsTransport(plain, raw, context.accept(raw, peer), buffers);
    }

    /** The client's identities: its PSK identity, or the names in its certificate; empty if it showed none. */
    public List<String> peerIdentities() {
        return secure.peerIdentities();
    }

    /** Protocol and cipher suite, for the log. */
    public String description() {
        return secure.description();
    }

    @Override
    public int receive(ByteBuffer dst) throws IOException {
        if (!dst.hasRemaining()) return 0;
        int n = takeAhead(dst);
        if (n < 0) return -1;
        if (n == 0) {
            n = read(dst);
            if (n < 0) return -1;
        }
        return n + drainDecrypted(dst);
    }

    @Override
    public int receiveNow(ByteBuffer dst) throws IOException {
        if (!dst.hasRemaining()) return 0;
        int n = takeAhead(dst);
        if (n < 0) return -1;
        return n + drainDecrypted(dst);
    }

    /**
     * Waits for decrypted bytes: with no limit it decrypts one byte ahead and keeps it for the next receive,
     * as that is the only way to know; with a limit it waits for the socket only, and a wake-up is a hint.
     */
    @Override
    public boolean awaitReadable(long timeoutMillis) throws IOException {
        if (ahead.position() == 1 || endAhead || secure.buffered() > 0) return true;
        if (timeoutMillis > 0) return plain.awaitReadable(timeoutMillis);
        if (read(ahead) < 0) endAhead = true;
        return true;
    }

    @Override
    public int pending() {
        return ahead.position() + secure.buffered();
    }

    @Override
    public void lowWater(int bytes) {
        // records arrive whole or not at all: a raised mark would say nothing about decrypted bytes
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
        return false;
    }

    @Override
    public long owedSince() {
        return raw.owedSince();
    }

    @Override
    public void sizeSendQueue(int bufferBytes, int unsentLimit) {
        plain.sizeSendQueue(bufferBytes, unsentLimit);
    }

    @Override
    public void send(ByteBuffer... srcs) throws IOException {
        secure.write(srcs);
    }

    @Override
    public long sendNow(ByteBuffer... srcs) {
        return 0;
    }

    /** Progress is the socket's: an encrypted write the client takes slowly still moves. */
    @Override
    public long lastSentNanos() {
        return plain.lastSentNanos();
    }

    /** Reads the range into a pool buffer, piece by piece, and sends each piece encrypted; the header goes with the first. */
    @Override
    public void sendFile(ByteBuffer header, PageCacheSource file, long position, long length) throws IOException {
        BufferPool.Lease lease;
        try {
            lease = buffers.acquire(Transports.pieceSize(length));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while waiting for a buffer");
        }
        try {
            Transports.copyFile(this, header, file.channel(), position, length, lease.buffer());
        } finally {
            lease.release();
        }
    }

    @Override
    public void shutdownInput() {
        inputShut = true;
        plain.shutdownInput();
    }

    @Override
    public void shutdown() {
        inputShut = true;
        plain.shutdown();
    }

    /** Sends close_notify if the socket takes it without waiting, then closes the socket. */
    @Override
    public void close() {
        raw.closing();
        secure.close();
        plain.close();
    }

    /** The byte awaitReadable decrypted ahead: 1, 0 if none, -1 if it found the end of the stream. */
    private int takeAhead(ByteBuffer dst) {
        if (ahead.position() == 1) {
            dst.put(ahead.flip());
            ahead.clear();
            return 1;
        }
        if (endAhead) {
            endAhead = false;
            return -1;
        }
        return 0;
    }

    /** Takes what is already decrypted, without waiting. */
    private int drainDecrypted(ByteBuffer dst) throws IOException {
        int n = 0;
        while (dst.hasRemaining() && secure.buffered() > 0) {
            int r = read(dst);
            if (r <= 0) break;
            n += r;
        }
        return n;
    }

    /** A read of the session; once this side shut the input down, whatever it then reports is the end of the stream. */
    private int read(ByteBuffer dst) throws IOException {
        try {
            return secure.read(dst);
        } catch (IOException e) {
            if (inputShut) return -1;
            throw e;
        }
    }
}
