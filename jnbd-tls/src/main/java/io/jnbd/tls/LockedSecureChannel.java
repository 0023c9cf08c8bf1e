package io.jnbd.tls;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.ReentrantLock;

/**
 * What both engines' sessions share: one writer at a time under {@link #sendLock}, records that reading made the
 * engine queue sent from a virtual thread rather than from the reader, and a close that sends close_notify only
 * if no write is stuck.
 *
 * <p>Why the reader never sends: it would wait for {@code sendLock} behind a writer that waits for the peer,
 * whose reader may be doing just the same.
 */
abstract class LockedSecureChannel implements SecureChannel {
    private static final Logger log = LoggerFactory.getLogger(LockedSecureChannel.class);
    /** How long close() waits for a writer in the middle of a write before giving up on close_notify. */
    private static final long CLOSE_WAIT_MS = 1000;

    final ReentrantLock sendLock = new ReentrantLock();
    private final AtomicBoolean flushStarted = new AtomicBoolean();
    private final AtomicBoolean closed = new AtomicBoolean();

    private volatile List<String> peerIdentities = List.of();
    private volatile String description = "";

    /** Sends what the engine has queued. Under sendLock. */
    abstract void flushQueued() throws IOException;

    /** Tells the engine to close and sends the close_notify it makes. Under sendLock. */
    abstract void closeOutbound() throws IOException;

    /** Set once the handshake is done. */
    final void established(String description, List<String> peerIdentities) {
        this.description = description;
        this.peerIdentities = List.copyOf(peerIdentities);
    }

    /** Has a virtual thread send what reading made the engine queue (see the class comment). */
    final void startFlush() {
        if (!flushStarted.compareAndSet(false, true)) return;
        Thread.ofVirtual().name("tls-flush").start(() -> {
            sendLock.lock();
            try {
                flushStarted.set(false);
                flushQueued();
            } catch (IOException e) {
                log.debug("TLS: could not send a record queued while reading: {}", e.toString());
            } finally {
                sendLock.unlock();
            }
        });
    }

    @Override
    public final List<String> peerIdentities() {
        return peerIdentities;
    }

    @Override
    public final String description() {
        return description;
    }

    @Override
    public final void close() {
        if (!closed.compareAndSet(false, true)) return;
        try {
            if (!sendLock.tryLock(CLOSE_WAIT_MS, TimeUnit.MILLISECONDS)) {
                log.debug("TLS: a write is still in progress; closing without close_notify");
                return;
            }
            try {
                closeOutbound();
            } finally {
                sendLock.unlock();
            }
        } catch (IOException e) {
            log.debug("TLS: could not send close_notify: {}", e.toString());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
