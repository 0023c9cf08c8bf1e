package io.jnbd.tls;

import org.bouncycastle.tls.TlsNoCloseNotifyException;
import org.bouncycastle.tls.TlsProtocol;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Function;

/**
 * A TLS session run by BouncyCastle's protocol engine in its non-blocking mode (bytes offered in, records read
 * out) over a {@link RawChannel}.
 *
 * <p>The engine is not thread-safe, so every call into it holds {@code engineLock}, briefly; the raw channel is
 * read and written outside it. Records leave in the order the engine made them because whoever takes them out
 * ({@link #drain}) holds {@code sendLock} until they are written. The engine queues the reply to a KeyUpdate
 * until the next application data, as RFC 8446 4.6.3 allows, so reading never has to send one; what reading does
 * queue (the answer to close_notify, a fatal alert) goes out through {@link LockedSecureChannel#startFlush}.
 */
final class BcSecureChannel extends LockedSecureChannel {
    private static final Logger log = LoggerFactory.getLogger(BcSecureChannel.class);
    /** Plaintext gathered per call into the engine: four records, one RawChannel.write. */
    private static final int STAGE = 4 << 14;

    private final TlsProtocol protocol;
    private final RawChannel raw;
    private final Function<Throwable, String> explain;
    private final ReentrantLock engineLock = new ReentrantLock();

    private final byte[] in = new byte[2 * Records.MAX_RECORD];    // reader
    private final ByteBuffer inBuf = ByteBuffer.wrap(in);
    private boolean inboundDone;                                     // reader
    private volatile int buffered;

    private final byte[] stage = new byte[STAGE];                    // under sendLock
    private final byte[] out = new byte[STAGE + 4096];               // under sendLock
    private final ByteBuffer outBuf = ByteBuffer.wrap(out);

    private BcSecureChannel(TlsProtocol protocol, RawChannel raw, Function<Throwable, String> explain) {
        this.protocol = protocol;
        this.raw = raw;
        this.explain = explain;
    }

    /**
     * Runs the handshake {@code protocol} was started on (accept or connect already called) over {@code raw}.
     * {@code received} holds bytes already read and checked to start a ClientHello, or is null;
     * {@code explain} turns a failure into the line to report.
     */
    static BcSecureChannel handshake(TlsProtocol protocol, RawChannel raw, boolean server, ByteBuffer received,
                                     Function<Throwable, String> explain) throws TlsException {
        BcSecureChannel c = new BcSecureChannel(protocol, raw, explain);
        try {
            c.runHandshake(server, received);
        } catch (IOException | RuntimeException e) {
            c.sendAlertQuietly();
            String why = explain.apply(e);
            throw e instanceof TlsException t && why.equals(t.getMessage()) ? t : new TlsException(why, e);
        }
        return c;
    }

    private void runHandshake(boolean server, ByteBuffer received) throws IOException {
        if (received != null) {
            int n = received.remaining();
            received.get(in, 0, n);
            protocol.offerInput(in, 0, n);
        } else if (server) {
            inBuf.clear();
            Records.expectHandshake(raw, inBuf, false, "a TLS ClientHello");
            protocol.offerInput(in, 0, inBuf.position());
        }
        boolean checked = server;
        while (true) {
            drain();
            if (!protocol.isHandshaking()) break;
            inBuf.clear();
            if (!checked) {
                Records.expectHandshake(raw, inBuf, true, "the server's TLS handshake");
                checked = true;
            } else if (raw.read(inBuf) < 0) {
                throw new TlsException("TLS handshake failed: the connection closed during the handshake");
            }
            protocol.offerInput(in, 0, inBuf.position());
        }
        buffered = protocol.getAvailableInputBytes();
    }

    @Override
    public int read(ByteBuffer dst) throws IOException {
        if (!dst.hasRemaining()) return 0;
        while (true) {
            engineLock.lock();
            try {
                int available = protocol.getAvailableInputBytes();
                if (available > 0) {
                    int n = protocol.readInput(dst, Math.min(available, dst.remaining()));
                    buffered = available - n;
                    return n;
                }
            } finally {
                engineLock.unlock();
            }
            if (inboundDone) return -1;
            inBuf.clear();
            int got = raw.read(inBuf);
            boolean reply;
            engineLock.lock();
            try {
                if (got < 0) {
                    inboundDone = true;
                    protocol.closeInput();
                    return -1;
                }
                protocol.offerInput(in, 0, got);
                if (protocol.isClosed()) inboundDone = true;
                buffered = protocol.getAvailableInputBytes();
                reply = protocol.getAvailableOutputBytes() > 0;
            } catch (TlsNoCloseNotifyException e) {
                return -1; // end of stream at a record boundary, without close_notify: an end all the same
            } catch (EOFException e) {
                throw new TlsException("connection closed in the middle of a TLS record");
            } catch (IOException | RuntimeException e) {
                inboundDone = true;
                startFlush();
                throw new TlsException("TLS session failed: " + explain.apply(e), e);
            } finally {
                engineLock.unlock();
            }
            if (reply) startFlush();
        }
    }

    @Override
    public int buffered() {
        return buffered;
    }

    @Override
    public void write(ByteBuffer... srcs) throws IOException {
        sendLock.lock();
        try {
            int i = 0;
            while (true) {
                int n = 0;
                while (n < STAGE && i < srcs.length) {
                    ByteBuffer s = srcs[i];
                    int k = Math.min(s.remaining(), STAGE - n);
                    s.get(s.position(), stage, n, k);
                    s.position(s.position() + k);
                    n += k;
                    if (!s.hasRemaining()) i++;
                }
                if (n == 0) return;
                engineLock.lock();
                try {
                    if (protocol.isClosed()) throw new TlsException("the TLS session is closed");
                    protocol.writeApplicationData(stage, 0, n);
                } finally {
                    engineLock.unlock();
                }
                drain();
            }
        } catch (TlsException e) {
            throw e;
        } catch (IOException | RuntimeException e) {
            throw new TlsException("TLS session failed: " + explain.apply(e), e);
        } finally {
            sendLock.unlock();
        }
    }

    /** Writes every record the engine has made. Under sendLock, or during the handshake. */
    private void drain() throws IOException {
        while (true) {
            int n;
            engineLock.lock();
            try {
                n = protocol.readOutput(out, 0, out.length);
            } finally {
                engineLock.unlock();
            }
            if (n == 0) return;
            outBuf.clear().limit(n);
            raw.write(outBuf);
        }
    }

    @Override
    void flushQueued() throws IOException {
        drain();
    }

    private void sendAlertQuietly() {
        try {
            drain();
        } catch (IOException | RuntimeException e) {
            log.debug("TLS: could not send the alert after a failed handshake: {}", e.toString());
        }
    }

    @Override
    void closeOutbound() throws IOException {
        engineLock.lock();
        try {
            protocol.close();
        } finally {
            engineLock.unlock();
        }
        drain();
    }
}
