package io.jnbd.proxy;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.ExportInfo;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;
import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.NbdErrorException;
import java.io.IOException;
import java.util.concurrent.CompletableFuture;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The client of the upstream export, connected again after it is lost. A request made while there is no
 * connection waits for one attempt to connect, shared by every request that arrives meanwhile, and fails with
 * it: so requests never queue behind an upstream that is away, and the first request after it is back is
 * served. No attempt is made without a request, so an idle export of a stopped server costs nothing.
 */
final class Upstream implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Upstream.class);

    private final NbdUri uri;
    private final ClientOptions options;
    /** What the first handshake reported: the export's size and capabilities were advertised from it. */
    private final ExportInfo info;
    private final int connections;
    /** The connected client, or the attempt under way; null or failed: the next request tries again. Written under the lock. */
    private volatile CompletableFuture<NbdClient> current;
    private boolean closed;
    private boolean down;

    private Upstream(NbdUri uri, ClientOptions options, NbdClient first) {
        this.uri = uri;
        this.options = options;
        this.info = first.info();
        this.connections = first.connectionCount();
        this.current = CompletableFuture.completedFuture(first);
    }

    /**
     * Connects for the first time. The export cannot be described to clients (size, flags, block sizes) without
     * the upstream's handshake, so an upstream that is away now fails the open.
     */
    static Upstream open(NbdUri uri, ClientOptions options) throws IOException {
        return new Upstream(uri, options, NbdClient.connect(uri, options));
    }

    ExportInfo info() {
        return info;
    }

    NbdUri uri() {
        return uri;
    }

    /** Connections the first handshake opened: more than one only where the upstream offers CAN_MULTI_CONN. */
    int connections() {
        return connections;
    }

    /** Whether a request sent now would go on a live connection: for tests. */
    synchronized boolean connected() {
        CompletableFuture<NbdClient> c = current;
        return c != null && c.isDone() && !c.isCompletedExceptionally() && c.join().connected();
    }

    /** The client to send a request with: the connected one, or the attempt to connect again. */
    CompletableFuture<NbdClient> client() {
        CompletableFuture<NbdClient> c = current;
        if (c != null && c.isDone() && !c.isCompletedExceptionally() && c.join().connected()) return c; // every request but after a loss
        return clientAfterLoss();
    }

    private synchronized CompletableFuture<NbdClient> clientAfterLoss() {
        if (closed) return CompletableFuture.failedFuture(new NbdErrorException(Nbd.ESHUTDOWN, "export is closing"));
        CompletableFuture<NbdClient> c = current;
        if (c != null && c.isDone() && !c.isCompletedExceptionally() && !c.join().connected()) {
            // Lost while idle (the upstream restarted between requests): no request need fail to find out.
            drop(c.join(), "its connections were closed");
            c = null;
        }
        if (c == null || c.isCompletedExceptionally()) current = c = connect();
        return c;
    }

    /**
     * A request on {@code client} failed in a way that says its connection is gone or stuck (lost, timed out,
     * protocol broken): it is dropped, and closed off the caller's thread since closing waits for the requests
     * still in flight. Later losses reported for a client already dropped change nothing.
     */
    synchronized void lost(NbdClient client, Throwable why) {
        CompletableFuture<NbdClient> c = current;
        if (c == null || !c.isDone() || c.isCompletedExceptionally() || c.join() != client) return;
        drop(client, why.getMessage());
    }

    private void drop(NbdClient client, String why) {
        current = null;
        down = true;
        log.warn("upstream {} lost ({}): requests fail with EIO until it is back", uri, why);
        Thread.ofVirtual().name("nbd-upstream-close").start(client::close);
    }

    private CompletableFuture<NbdClient> connect() {
        CompletableFuture<NbdClient> attempt = new CompletableFuture<>();
        Thread.ofVirtual().name("nbd-upstream-connect").start(() -> {
            try {
                NbdClient c = NbdClient.connect(uri, options);
                String changed = c.size() != info.size() ? "its size changed from " + info.size() + " to " + c.size()
                    : c.info().readOnly() && !info.readOnly() ? "it became read-only" : null;
                if (changed != null) {
                    c.close();
                    attempt.completeExceptionally(new IOException("upstream " + uri + " is back but " + changed + ": not served"));
                    return;
                }
                synchronized (this) {
                    if (down) log.info("upstream {} is back", uri);
                    down = false;
                }
                // An export closed meanwhile closes the client when the attempt completes (see close).
                attempt.complete(c);
            } catch (IOException | RuntimeException e) {
                attempt.completeExceptionally(e);
            }
        });
        return attempt;
    }

    @Override
    public void close() {
        CompletableFuture<NbdClient> c;
        synchronized (this) {
            if (closed) return;
            closed = true;
            c = current;
            current = null;
        }
        if (c != null) c.thenAccept(NbdClient::close);
    }
}
