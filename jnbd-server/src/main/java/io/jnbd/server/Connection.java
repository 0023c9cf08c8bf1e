package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.ProtocolException;
import io.jnbd.protocol.Request;
import io.jnbd.server.io.BufferPool;
import io.jnbd.server.net.TlsTransport;
import io.jnbd.server.net.Transport;
import io.jnbd.tls.TlsException;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetAddress;
import java.nio.channels.ClosedChannelException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One client connection: the handshake, then the transmission phase, on one virtual thread.
 *
 * <p>A request goes one way through four pieces: {@link Intake} receives it, this class validates it and takes
 * its share of the {@link Window}, the {@link Dispatcher} serves each batch by the route its {@link DataPath}
 * allows, and {@link Replies} encodes the answer that the connection's {@link ReplyWriter} sends. Each request
 * holds its share of the window from the moment it is read until its reply is on the wire. Requests go to the
 * export's view for this connection (Backend.forConnection), which is ended once, however the connection ends.
 *
 * <p>The connection speaks over its socket's transport until the client asks for STARTTLS, then over TLS on the
 * same socket: {@link #transport} is whichever the handshake ended with. Stopping the connection goes through the
 * socket's transport in either phase, which any thread may do.
 */
final class Connection implements Runnable {
    private static final Logger log = LoggerFactory.getLogger(Connection.class);

    private final NbdServer server;
    /** The accepted socket's transport: what abort shuts down, in either phase. */
    private final Transport socket;
    /** What the transmission phase speaks over: {@link #socket}, or TLS over it; set before {@link #transmitting}. */
    private volatile Transport transport;
    private final String peer;
    /** The client's IP address, null over a Unix socket: what export access lists check. */
    private final InetAddress address;
    /** Set for a client the server has no room for: the handshake turns every option down with it. */
    private final Handshake.Refusal refused;
    /** Set once the handshake has chosen an export; only this connection's thread touches the field. */
    private ConnectionStats stats;
    private volatile boolean transmitting;
    private volatile boolean stopRequested;
    private volatile boolean aborted;
    private volatile String dropReason;
    private volatile ReplyWriter writer;
    private volatile Intake intake;
    /** The transmission phase's window, once it has begun: what a drain watches (requestsInFlight). */
    private volatile Window window;
    private volatile java.util.concurrent.Future<?> handshakeTimer;

    Connection(NbdServer server, Transport socket, String peer, InetAddress address, Handshake.Refusal refused) {
        this.server = server;
        this.socket = socket;
        this.transport = socket;
        this.peer = peer;
        this.address = address;
        this.refused = refused;
    }

    String peer() {
        return peer;
    }

    boolean inTransmission() {
        return transmitting;
    }

    /** The timer that ends a handshake that takes too long; cancelled once the handshake is over. */
    void handshakeTimer(java.util.concurrent.Future<?> timer) {
        handshakeTimer = timer;
        if (transmitting) timer.cancel(false);
    }

    private void handshakeOver() {
        var t = handshakeTimer;
        if (t != null) t.cancel(false);
    }

    /** Whether this connection holds one of the server's connection slots (a refused one does not). */
    boolean admitted() {
        return refused == null;
    }

    /**
     * Requests this connection has read and not yet answered in full; 0 before the transmission phase. A request
     * refused during a drain does not count (see {@link #refuse}).
     */
    int requestsInFlight() {
        Window w = window;
        return w == null ? 0 : w.inFlight();
    }

    /**
     * Stops reading new requests; requests already read are still served and answered, then the connection's view
     * of its export is flushed and the connection closed. One still in its handshake is closed at once.
     */
    void stopReading() {
        stopRequested = true;
        if (!transmitting) {
            abort();
            return;
        }
        transport.shutdownInput();
    }

    /**
     * Ends the connection from any thread: shuts the socket down in both directions, which wakes every
     * thread waiting on it. The descriptor itself is closed only by {@link #run} once the writer has finished,
     * because the writer may be inside a sendfile on it, and a closed descriptor number can be reused by
     * another client's socket.
     */
    void abort() {
        aborted = true;
        socket.shutdown();
    }

    /** How long the writer has waited for the client to take a reply, in nanoseconds; 0 when it is not writing. */
    long writerStalledNanos(long now) {
        ReplyWriter w = writer;
        return w == null ? 0 : w.stalledNanos(now);
    }

    /**
     * How long the client has left a request it began sending unfinished, in nanoseconds; 0 if it has not. Under
     * TLS a record it began counts too: the request's bytes may be inside it.
     */
    long receiveStalledNanos(long now) {
        Intake i = intake;
        long request = i == null ? 0 : i.stalledNanos(now);
        long record = transmitting ? transport.owedSince() : 0;
        return Math.max(request, record == 0 ? 0 : now - record);
    }

    /** Ends the connection (see {@link #abort()}), saying why in the line that logs its end. */
    void drop(String why) {
        dropReason = why;
        abort();
    }

    @Override
    public void run() {
        String end = "client disconnected";
        Session session = null;
        boolean tlsFailed = false;
        ServerTls tls = server.tls();
        Handshake handshake = new Handshake(socket, server.exports(),
            () -> server.stopping() ? NbdServer.SHUTTING_DOWN : refused, tls.mode(),
            plain -> TlsTransport.accept(tls.context(), plain, peer, server.buffers()), peer, Client.at(address));
        try {
            session = handshake.run();
            if (session == null) {
                log.debug("{}: handshake ended without an export", peer);
                return;
            }
            stats = new ConnectionStats(server.stats().export(server.exports().shown(session.export().name())));
            transport = handshake.transport();
            sizeSendQueue();
            transmitting = true;
            handshakeOver();
            server.exports().attached(session.export(), peer);
            log.info("{}: connected to export '{}' ({}structured replies{}, flags {}{})", peer, server.exports().shown(session.export().name()),
                session.structuredReplies() ? "" : "no ", describeContexts(session),
                String.join(",", Nbd.transmissionFlagNames(session.transmissionFlags())), describeTls(transport));
            end = transmission(session);
        } catch (ProtocolException e) {
            end = "closed for a protocol error: " + e.getMessage();
        } catch (TlsException e) {
            // When the server itself cut the connection (handshake timeout, shutdown), TLS only reports the cut.
            tlsFailed = !aborted;
            end = aborted ? "closed by the server" : tlsFailure(e);
        } catch (EOFException | ClosedChannelException e) {
            end = stopRequested ? "closed by server shutdown" : "client disconnected";
        } catch (IOException e) {
            end = "connection error: " + e.getMessage();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            end = "interrupted";
        } catch (RuntimeException | Error e) {
            end = "internal error: " + e;
            log.error("{}: internal error", peer, e);
        } finally {
            handshakeOver();
            if (transmitting) server.exports().detached(session.export(), peer);
            if (stats != null) stats.closed();
            if (dropReason != null) end = dropReason;
            Intake i = intake;
            if (i != null) i.release();
            handshake.transport().close(); // under TLS, sends close_notify first
            server.connectionClosed(this);
            if (session != null) log.info("{}: disconnected from '{}' ({}): {}", peer, server.exports().shown(session.export().name()), end, stats);
            else if (refused != null) log.debug("{}: refused ({}): {}", peer, refused.message(), end);
            else if (tlsFailed) log.warn("{}: {}", peer, end);
            else log.info("{}: {} during handshake", peer, end);
        }
    }

    /** Ends the export's view for this connection, once; a filter failing at it must not hide why the connection ended. */
    private void connectionEnded(io.jnbd.server.backend.Backend view) {
        try {
            view.connectionClosed();
        } catch (RuntimeException | Error e) {
            log.error("{}: freeing the connection's state in {} failed", peer, view.describe(), e);
        }
    }

    /** Sets a TCP socket's send queue for what the transmission phase sends: see ServerConfig.TLS_UNSENT_LIMIT. */
    private void sizeSendQueue() {
        if (address == null) return;
        boolean encrypted = transport instanceof TlsTransport;
        int buffer = server.config().sendBufferFor(encrypted, () -> io.jnbd.server.net.Listener.onThisHost(address));
        transport.sizeSendQueue(buffer, encrypted ? ServerConfig.TLS_UNSENT_LIMIT : 0);
    }

    /** The line that ends a connection TLS failed on, naming TLS once whether or not its message does. */
    private static String tlsFailure(TlsException e) {
        String why = String.valueOf(e.getMessage());
        if (why.startsWith("TLS")) return why;
        return (e instanceof Handshake.TlsHandshakeFailed ? "TLS handshake failed: " : "TLS session failed: ") + why;
    }

    private static String describeTls(Transport t) {
        if (!(t instanceof TlsTransport tls)) return "";
        List<String> ids = tls.peerIdentities();
        return ", TLS " + tls.description() + (ids.isEmpty() ? "" : ", identity " + String.join(",", ids));
    }

    /** The metadata contexts block status answers on this connection, for its log line. */
    private static String describeContexts(Session session) {
        if (!session.blockStatusAllowed()) return "";
        StringBuilder b = new StringBuilder();
        for (MetaContext c : session.metaContexts()) b.append(", ").append(c.name());
        return b.toString();
    }

    /**
     * Answers a request read after the server began to drain with NBD_ESHUTDOWN, the spec's "reconnect later":
     * its payload is read and dropped, nothing reaches the export, and its window share goes back at once.
     */
    private void refuse(InFlight f, Intake in, Window window, Dispatcher dispatcher, Replies replies) throws IOException {
        window.release(f);
        server.drain().refused();
        Request r = f.request;
        if (r.hasPayload() && r.length() > 0) in.discard(r.length());
        dispatcher.emit(replies.refusal(r));
    }

    /** Reads requests until DISC, EOF or a protocol error; returns why it ended. */
    private String transmission(Session session) throws IOException, ProtocolException, InterruptedException {
        ServerConfig config = server.config();
        Window window = new Window(config.requestsInFlight(), stats);
        this.window = window;
        RequestValidator validator = new RequestValidator(session);
        Intake in = new Intake(transport, server.inputBuffers(), config.busyPoll().toNanos(), config.receiveTimeout());
        intake = in;
        ReplyWriter out = new ReplyWriter(transport, window::completed, this::abort);
        Dispatcher dispatcher = new Dispatcher(session, window, out, Thread.currentThread(), this::drop);
        Replies replies = new Replies(session, stats, peer);
        DataPath path = DataPath.of(session.export(), session.context(), transport.zeroCopyFiles(), server.executorFor(session.export().backend()),
            server.buffers(), replies, stats, dispatcher);
        try {
            dispatcher.use(path);
            writer = out;
            Thread writerThread = Thread.ofVirtual().name("jnbd-writer-" + peer).start(out);
            List<InFlight> batch = new ArrayList<>();
            Runnable submit = () -> dispatcher.submit(batch);
            // The budget may be held by this very batch's payloads: submit them before waiting for more.
            Intake.Leaser leaser = size -> {
                BufferPool.Lease lease = server.buffers().tryAcquire(size, 0);
                if (lease != null) return lease;
                submit.run();
                return server.buffers().acquire(size);
            };
            String end = "client disconnected";
            try {
                while (true) {
                    Request r = in.next();
                    if (r == null) {
                        // Everything received so far is parsed: hand it over before waiting for more. Requests still
                        // being served will reply on their own time: then the CPU is better left to the I/O threads
                        // than spent polling for the next request.
                        submit.run();
                        if (!in.fill(window.inFlight() == 0)) {
                            end = stopRequested ? "closed by server shutdown" : "client disconnected";
                            break;
                        }
                        continue;
                    }
                    long received = System.nanoTime();
                    stats.request(r.type());
                    if (r.type() == Nbd.CMD_DISC) {
                        end = "client sent DISC";
                        break;
                    }
                    int error = validator.check(r);
                    if (r.hasPayload() && error != 0) {
                        if (r.length() > config.maxPayload() && r.length() > config.writeDiscardLimit()) {
                            throw new ProtocolException("refused a write of " + r.length() + " bytes, too long to read and drop");
                        }
                        in.discard(r.length());
                    }
                    InFlight f = new InFlight(r, received,
                        error == 0 ? Window.bytePermits(r, path.zeroCopy(), session.export().streamed(r)) : 0);
                    window.acquire(f, submit);
                    if (error != 0) {
                        dispatcher.emit(replies.error(f, error, RequestValidator.message(r, error)));
                        continue;
                    }
                    // Checked after the window share is taken: a request that saw no drain is in the window the
                    // drain watches, so the drain waits for it (Drain). The one cost of the drain per request.
                    if (server.stopping()) {
                        refuse(f, in, window, dispatcher, replies);
                        continue;
                    }
                    if (dispatcher.inPieces(f)) {
                        submit.run(); // what came before goes first: this request's pieces may take a while
                        dispatcher.serveInPieces(f, in, leaser);
                        continue;
                    }
                    if (r.hasPayload() && r.length() > 0) {
                        Payload payload = new Payload();
                        f.payload = payload;
                        try {
                            in.receivePayload(r.length(), Intake.PIECE, leaser, (at, piece) -> payload.add(piece));
                        } catch (IOException | InterruptedException | RuntimeException e) {
                            window.completed(f);
                            throw e;
                        }
                    }
                    batch.add(f);
                }
            } finally {
                submit.run();
                // Serve what was already accepted, then let the writer drain and stop.
                window.drain(60);
                out.finish();
                writerThread.join(TimeUnit.SECONDS.toMillis(10));
                if (writerThread.isAlive()) {
                    abort(); // wakes a writer stuck on a client that does not read
                    writerThread.join();
                }
            }
            return end;
        } finally {
            // A drain closing this connection (Drain): what it was told is written goes to disk before it sees the close.
            if (stopRequested && !aborted && !session.readOnly()) flushForShutdown(path.backend());
            // After the drain: the requests the view served are answered (or, past the drain's wait, abandoned).
            connectionEnded(path.backend());
        }
    }

    private void flushForShutdown(io.jnbd.server.backend.Backend view) {
        try {
            view.flush();
        } catch (IOException | RuntimeException e) {
            log.error("{}: flush at shutdown failed: {}", peer, e.toString());
        }
    }
}
