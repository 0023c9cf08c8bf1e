package io.jnbd.tls;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLEngineResult;
import javax.net.ssl.SSLEngineResult.HandshakeStatus;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLPeerUnverifiedException;
import javax.net.ssl.SSLSession;
import java.security.cert.X509Certificate;

/**
 * A TLS session run by the JDK's {@link SSLEngine} over a {@link RawChannel}.
 *
 * <p>The reader owns {@code netIn} and {@code appIn}; the writer owns {@code netOut} under {@code sendLock}.
 * The engine itself lets wrap and unwrap run at once. When an unwrap leaves a record for the engine to send
 * (the reply to a TLS 1.3 KeyUpdate, a TLS 1.2 close_notify), the reader leaves it to
 * {@link LockedSecureChannel#startFlush}; a busy writer sends the record first anyway, since the engine puts
 * queued handshake records ahead of application data.
 */
final class JdkSecureChannel extends LockedSecureChannel {
    private static final Logger log = LoggerFactory.getLogger(JdkSecureChannel.class);
    private static final ByteBuffer EMPTY = ByteBuffer.allocate(0);
    /** Ciphertext records gathered into one RawChannel.write: fewer system calls, bounded memory per connection. */
    private static final int RECORDS_PER_WRITE = 4;
    /** Room for this many records per RawChannel.read. */
    private static final int RECORDS_PER_READ = 4;

    private final SSLEngine engine;
    private final RawChannel raw;
    private final int packetSize;
    private final int appSize;

    private ByteBuffer netIn;          // reader: ciphertext received, read mode
    private ByteBuffer appIn;          // reader: plaintext not yet returned, read mode
    private boolean inboundDone;       // reader
    private volatile int buffered;

    private final ByteBuffer netOut;   // under sendLock

    private JdkSecureChannel(SSLEngine engine, RawChannel raw) {
        this.engine = engine;
        this.raw = raw;
        SSLSession s = engine.getSession();
        packetSize = Math.max(s.getPacketBufferSize(), Records.MAX_RECORD);
        appSize = s.getApplicationBufferSize();
        // Heap buffers: the JDK's AES-GCM costs less CPU on arrays than on direct memory (measured, see
        // docs/decisions/0007-tls-engines.md), and BouncyCastle's engine needs arrays anyway.
        netIn = ByteBuffer.allocate(packetSize * RECORDS_PER_READ).flip();
        appIn = ByteBuffer.allocate(appSize).flip();
        netOut = ByteBuffer.allocate(packetSize * RECORDS_PER_WRITE);
    }

    /**
     * Runs the handshake of {@code engine} (already in client or server mode) over {@code raw}. {@code received}
     * holds bytes already read from {@code raw} and checked to start a handshake, or is null.
     */
    static JdkSecureChannel handshake(SSLEngine engine, RawChannel raw, ByteBuffer received) throws TlsException {
        JdkSecureChannel c = new JdkSecureChannel(engine, raw);
        try {
            c.runHandshake(received);
        } catch (IOException | RuntimeException e) {
            c.sendAlertQuietly();
            throw Failures.handshake(e);
        }
        return c;
    }

    private void runHandshake(ByteBuffer received) throws IOException {
        boolean server = !engine.getUseClientMode();
        boolean checked = false;
        if (received != null) {
            netIn.clear();
            netIn.put(received);
            netIn.flip();
            checked = true;
        }
        ByteBuffer scratch = appIn.clear();
        engine.beginHandshake();
        while (true) {
            switch (engine.getHandshakeStatus()) {
                case NEED_TASK -> runTasks();
                case NEED_WRAP -> {
                    netOut.clear();
                    SSLEngineResult r = engine.wrap(EMPTY, netOut);
                    send();
                    if (r.getStatus() == SSLEngineResult.Status.CLOSED) {
                        throw new TlsException("TLS handshake failed: the session was closed during the handshake");
                    }
                }
                case NEED_UNWRAP, NEED_UNWRAP_AGAIN -> {
                    if (!checked) {
                        // The first bytes from the peer: say plainly if they are not TLS at all.
                        netIn.compact();
                        Records.expectHandshake(raw, netIn, !server, server ? "a TLS ClientHello" : "the server's TLS handshake");
                        netIn.flip();
                        checked = true;
                    }
                    SSLEngineResult r = engine.unwrap(netIn, scratch);
                    switch (r.getStatus()) {
                        case BUFFER_UNDERFLOW -> {
                            if (fill() < 0) throw new TlsException("TLS handshake failed: the connection closed during the handshake");
                        }
                        case CLOSED -> throw new TlsException("TLS handshake failed: the peer closed the session during the handshake");
                        case BUFFER_OVERFLOW -> throw new TlsException("TLS handshake failed: a record larger than " + scratch.capacity() + " bytes");
                        case OK -> { }
                    }
                }
                case FINISHED, NOT_HANDSHAKING -> {
                    scratch.flip();
                    SSLSession s = engine.getSession();
                    established(s.getProtocol() + " " + s.getCipherSuite(), identities(s));
                    decryptAhead();
                    return;
                }
            }
        }
    }

    private static List<String> identities(SSLSession s) {
        try {
            return s.getPeerCertificates()[0] instanceof X509Certificate c ? List.copyOf(Names.of(c)) : List.of();
        } catch (SSLPeerUnverifiedException none) {
            return List.of();
        }
    }

    @Override
    public int read(ByteBuffer dst) throws IOException {
        if (!dst.hasRemaining()) return 0;
        try {
            while (true) {
                if (appIn.hasRemaining()) {
                    int n = Math.min(appIn.remaining(), dst.remaining());
                    dst.put(dst.position(), appIn, appIn.position(), n);
                    dst.position(dst.position() + n);
                    appIn.position(appIn.position() + n);
                    if (!appIn.hasRemaining()) decryptAhead();
                    buffered = appIn.remaining();
                    return n;
                }
                if (inboundDone) return -1;
                if (dst.remaining() >= appSize) {
                    // Room for a whole record: decrypt straight into the caller's buffer, as many records as are here.
                    int n = unwrap(dst, true);
                    if (n == OVERFLOW) {
                        fillAppIn(true);
                        continue;
                    }
                    if (n < 0) return -1;
                    while (dst.remaining() >= appSize) {
                        int more = unwrap(dst, false);
                        if (more <= 0) break;
                        n += more;
                    }
                    decryptAhead();
                    buffered = appIn.remaining();
                    return n;
                }
                fillAppIn(true);
            }
        } catch (SSLException e) {
            inboundDone = true;
            throw Failures.session(e);
        }
    }

    @Override
    public int buffered() {
        return buffered;
    }

    private static final int OVERFLOW = -2;

    /**
     * Unwraps records into {@code target} until one gives application data: the bytes it gave; -1 at the end of
     * the session; 0 if {@code mayWait} is false and no whole record is held; OVERFLOW if {@code target} is too small.
     */
    private int unwrap(ByteBuffer target, boolean mayWait) throws IOException {
        while (true) {
            SSLEngineResult r = engine.unwrap(netIn, target);
            afterUnwrap(r.getHandshakeStatus());
            switch (r.getStatus()) {
                case OK -> {
                    if (r.bytesProduced() > 0) return r.bytesProduced();
                }
                case CLOSED -> {
                    inboundDone = true;
                    return -1;
                }
                case BUFFER_UNDERFLOW -> {
                    if (!mayWait) return 0;
                    if (fill() < 0) {
                        if (netIn.hasRemaining()) throw new TlsException("connection closed in the middle of a TLS record");
                        inboundDone = true;
                        return -1;
                    }
                }
                case BUFFER_OVERFLOW -> {
                    return OVERFLOW;
                }
            }
        }
    }

    /** Decrypts into the empty {@code appIn} (left in read mode). */
    private void fillAppIn(boolean mayWait) throws IOException {
        appIn.clear();
        int n = unwrap(appIn, mayWait);
        if (n == OVERFLOW) {
            // The session's records grew past what was planned for: make room once.
            appIn = ByteBuffer.allocate(engine.getSession().getApplicationBufferSize() * 2);
            n = unwrap(appIn, mayWait);
        }
        appIn.flip();
    }

    /**
     * Decrypts any whole record already received while {@code appIn} is empty, so that buffered() == 0 means a
     * read would wait for the network: the server tells from buffered() whether to wait for its socket, and bytes
     * sitting here undecrypted would never make that socket readable.
     */
    private void decryptAhead() throws IOException {
        if (!appIn.hasRemaining() && !inboundDone && netIn.hasRemaining()) fillAppIn(false);
    }

    private int fill() throws IOException {
        netIn.compact();
        try {
            if (!netIn.hasRemaining()) throw new TlsException("TLS record larger than " + netIn.capacity() + " bytes");
            return raw.read(netIn);
        } finally {
            netIn.flip();
        }
    }

    private void afterUnwrap(HandshakeStatus hs) {
        if (hs == HandshakeStatus.NEED_TASK) {
            runTasks();
        } else if (hs == HandshakeStatus.NEED_WRAP) {
            startFlush();
        }
    }

    /** Sends what the engine queued while reading (see LockedSecureChannel). */
    @Override
    void flushQueued() throws IOException {
        netOut.clear();
        while (engine.getHandshakeStatus() == HandshakeStatus.NEED_WRAP) {
            SSLEngineResult r = engine.wrap(EMPTY, netOut);
            if (r.getHandshakeStatus() == HandshakeStatus.NEED_TASK) runTasks();
            if (r.bytesProduced() == 0) break;
        }
        send();
    }

    @Override
    public void write(ByteBuffer... srcs) throws IOException {
        long left = 0;
        for (ByteBuffer b : srcs) left += b.remaining();
        sendLock.lock();
        try {
            while (left > 0) {
                netOut.clear();
                while (left > 0 && netOut.remaining() >= packetSize) {
                    SSLEngineResult r = engine.wrap(srcs, netOut);
                    if (r.getStatus() == SSLEngineResult.Status.CLOSED) throw new TlsException("the TLS session is closed");
                    if (r.getStatus() == SSLEngineResult.Status.BUFFER_OVERFLOW) break;
                    if (r.getHandshakeStatus() == HandshakeStatus.NEED_TASK) runTasks();
                    left -= r.bytesConsumed();
                }
                send();
            }
        } catch (SSLException e) {
            throw Failures.session(e);
        } finally {
            sendLock.unlock();
        }
    }

    /** Writes netOut, filled since its last clear(). Under sendLock, or during the handshake. */
    private void send() throws IOException {
        netOut.flip();
        if (netOut.hasRemaining()) raw.write(netOut);
        netOut.clear();
    }

    private void runTasks() {
        for (Runnable t = engine.getDelegatedTask(); t != null; t = engine.getDelegatedTask()) t.run();
    }

    /** After a failed handshake the engine holds the alert that says why: let the peer have it. */
    private void sendAlertQuietly() {
        try {
            netOut.clear();
            engine.closeOutbound();
            while (!engine.isOutboundDone()) {
                if (engine.wrap(EMPTY, netOut).bytesProduced() == 0) break;
            }
            send();
        } catch (IOException | RuntimeException e) {
            log.debug("TLS: could not send the alert after a failed handshake: {}", e.toString());
        }
    }

    @Override
    void closeOutbound() throws IOException {
        engine.closeOutbound();
        netOut.clear();
        while (!engine.isOutboundDone()) {
            if (engine.wrap(EMPTY, netOut).bytesProduced() == 0) break;
        }
        send();
    }
}
