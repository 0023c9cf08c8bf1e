package io.jnbd.server.control;

import io.jnbd.server.ExportRegistry;
import io.jnbd.server.control.ControlProtocol.Reply;
import io.jnbd.server.net.UnixPeer;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousCloseException;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A running server's control socket (see {@link ControlProtocol}): a Unix-domain socket of mode 0600 (see
 * {@link ControlSocketFile}) and, behind the mode, the kernel's word on who connected (SO_PEERCRED): anyone but the
 * server's own user and root gets one error line and is closed. Binding and serving are two steps, so a command line
 * learns that the path is taken before it opens any export:
 *
 * <pre>{@code
 * try (var control = ControlEndpoint.bind(Path.of("/run/jnbd.ctl"))) {
 *     control.serve(registry);
 *     server.awaitStop();
 * }
 * }</pre>
 *
 * Its threads are its own (one accepting, a virtual one per peer, at most {@value #MAX_PEERS} peers), and a peer
 * gets {@link #REQUEST_TIMEOUT} to send each request and {@link #REPLY_TIMEOUT} to take each reply, so a silent or
 * slow peer holds only its own connection.
 */
public final class ControlEndpoint implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(ControlEndpoint.class);

    static final int MAX_PEERS = 8;
    static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(30);
    static final Duration REPLY_TIMEOUT = Duration.ofSeconds(10);

    private final ControlSocketFile file;
    private final Duration requestTimeout;
    private final Semaphore peers = new Semaphore(MAX_PEERS);
    private final Set<SocketChannel> open = ConcurrentHashMap.newKeySet();
    /** Each peer's thread: close() waits for a change in progress to finish before the exports are closed. */
    private final Set<Thread> running = ConcurrentHashMap.newKeySet();
    /** Closes the channel of a peer that ran out of time: the blocked read or write then fails. */
    private final ScheduledThreadPoolExecutor timer;
    private volatile ControlRequests requests;
    private volatile boolean closed;
    private Thread acceptor;

    private ControlEndpoint(ControlSocketFile file, Duration requestTimeout) {
        this.file = file;
        this.requestTimeout = requestTimeout;
        this.timer = new ScheduledThreadPoolExecutor(1, r -> Thread.ofPlatform().daemon().name("jnbd-control-timer").unstarted(r));
        timer.setRemoveOnCancelPolicy(true);
    }

    /** Listens at {@code path} (see {@link ControlSocketFile} for how); serves nothing until {@link #serve}. */
    public static ControlEndpoint bind(Path path) throws IOException {
        return bind(path, REQUEST_TIMEOUT);
    }

    static ControlEndpoint bind(Path path, Duration requestTimeout) throws IOException {
        return new ControlEndpoint(ControlSocketFile.bind(path), requestTimeout);
    }

    /** The socket's path, absolute. */
    public Path path() {
        return file.path();
    }

    /** Starts answering requests about {@code exports}, looked up afresh for each request (a reload is seen at once). */
    public synchronized void serve(ExportRegistry exports) {
        if (acceptor != null) throw new IllegalStateException("already serving");
        requests = new ControlRequests(exports);
        acceptor = Thread.ofPlatform().daemon().name("jnbd-control").start(this::acceptLoop);
        log.info("control socket {}: bitmap changes by uid {} and root", path(), UnixPeer.selfUid() >= 0 ? UnixPeer.selfUid() : "of this server");
    }

    private void acceptLoop() {
        while (!closed) {
            SocketChannel ch;
            try {
                ch = file.channel().accept();
            } catch (ClosedChannelException e) {
                return;
            } catch (IOException e) {
                if (closed) return;
                log.warn("control socket {}: accept failed: {}", path(), e.toString());
                pause(); // out of descriptors: do not spin
                continue;
            }
            if (!peers.tryAcquire()) {
                log.warn("control socket {}: {} peers already connected; one more refused", path(), MAX_PEERS);
                sendAndClose(ch, Reply.error("busy: " + MAX_PEERS + " control connections are open"));
                continue;
            }
            open.add(ch);
            if (closed) { // close() may have missed it
                open.remove(ch);
                closeQuietly(ch);
                return;
            }
            Thread peer = Thread.ofVirtual().name("jnbd-control-peer").unstarted(() -> {
                try {
                    converse(ch);
                } finally {
                    open.remove(ch);
                    closeQuietly(ch);
                    peers.release();
                    running.remove(Thread.currentThread());
                }
            });
            // Listed and started as one step: close() joins what it finds listed, and an unstarted thread cannot be joined.
            synchronized (running) {
                running.add(peer);
                peer.start();
            }
        }
    }

    private void converse(SocketChannel ch) {
        UnixPeer peer;
        try {
            peer = UnixPeer.of(ch);
        } catch (IOException | RuntimeException e) {
            log.warn("control socket {}: refused a peer whose credentials could not be read: {}", path(), e.toString());
            write(ch, ControlProtocol.encode(Reply.error("permission denied: the server could not learn who you are")), null);
            return;
        }
        if (!peer.selfOrRoot()) {
            long self = UnixPeer.selfUid();
            log.warn("control socket {}: refused {}: only {} and root may use it", path(), peer, self >= 0 ? "uid " + self : "the server's user");
            if (write(ch, ControlProtocol.encode(Reply.error("permission denied: only " + (self >= 0 ? "uid " + self : "the server's user")
                + " and root may use this control socket")), peer)) {
                drain(ch, peer);
            }
            return;
        }
        if (!write(ch, ControlProtocol.greeting(), peer)) return;
        ByteBuffer in = ByteBuffer.allocate(ControlProtocol.MAX_LINE);
        while (true) {
            String line;
            ScheduledFuture<?> deadline = deadline(ch, peer, "sent no complete request", requestTimeout);
            try {
                line = readLine(ch, in);
            } catch (LineTooLong e) {
                if (!write(ch, ControlProtocol.encode(Reply.error("request longer than " + ControlProtocol.MAX_LINE + " bytes")), peer)) return;
                continue;
            } catch (IOException e) {
                return; // closed by the deadline, by close(), or by the peer
            } finally {
                if (deadline != null) deadline.cancel(false);
            }
            if (line == null) return;
            Reply reply;
            try {
                reply = requests.handle(ControlProtocol.decodeRequest(line), peer);
            } catch (ControlProtocol.BadLine e) {
                reply = Reply.error("bad request: " + e.getMessage());
            }
            if (!write(ch, ControlProtocol.encode(reply), peer)) return;
        }
    }

    private static final class LineTooLong extends IOException {
        LineTooLong() {
            super(null, null);
        }
    }

    /**
     * The next line (without its newline, and a carriage return before it) from {@code ch}, keeping what follows it
     * in {@code in} for the next call; null at the end of the stream. A line longer than the buffer is read to its
     * end and dropped, then {@link LineTooLong}: the reply to it follows the whole line, and the peer's next line
     * is read as one (closing with the rest unread would reset the connection and lose the reply).
     */
    private static String readLine(SocketChannel ch, ByteBuffer in) throws IOException {
        boolean tooLong = false;
        while (true) {
            for (int i = 0; i < in.position(); i++) {
                if (in.get(i) != '\n') continue;
                int end = i > 0 && in.get(i - 1) == '\r' ? i - 1 : i;
                String line = tooLong ? null : new String(in.array(), 0, end, StandardCharsets.UTF_8);
                in.flip().position(i + 1);
                in.compact();
                if (tooLong) throw new LineTooLong();
                return line;
            }
            if (!in.hasRemaining()) {
                tooLong = true;
                in.clear();
            }
            if (ch.read(in) < 0) return null;
        }
    }

    /**
     * Sends the end of the stream and reads what the peer still sends until it closes, within {@link #REPLY_TIMEOUT}:
     * a socket closed with bytes unread resets the connection, and the peer might see that instead of its reply.
     */
    private void drain(SocketChannel ch, UnixPeer peer) {
        ScheduledFuture<?> deadline = deadline(ch, peer, "did not close", REPLY_TIMEOUT);
        try {
            ch.shutdownOutput();
            ByteBuffer scrap = ByteBuffer.allocate(4096);
            while (ch.read(scrap.clear()) >= 0) {
                // dropped unread
            }
        } catch (IOException e) {
            // closed by the deadline, or by the peer
        } finally {
            if (deadline != null) deadline.cancel(false);
        }
    }

    /** Writes one line within {@link #REPLY_TIMEOUT}; false when it could not. */
    private boolean write(SocketChannel ch, String line, UnixPeer peer) {
        ByteBuffer out = ByteBuffer.wrap((line + "\n").getBytes(StandardCharsets.UTF_8));
        ScheduledFuture<?> deadline = deadline(ch, peer, "took no reply", REPLY_TIMEOUT);
        try {
            while (out.hasRemaining()) ch.write(out);
            return true;
        } catch (IOException e) {
            return false;
        } finally {
            if (deadline != null) deadline.cancel(false);
        }
    }

    /** Closes {@code ch} after {@code limit} unless cancelled; at once (and null) if the endpoint is closing. */
    private ScheduledFuture<?> deadline(SocketChannel ch, UnixPeer peer, String what, Duration limit) {
        try {
            return timer.schedule(() -> expire(ch, peer, what), limit.toNanos(), TimeUnit.NANOSECONDS);
        } catch (RejectedExecutionException e) {
            closeQuietly(ch);
            return null;
        }
    }

    private void expire(SocketChannel ch, UnixPeer peer, String what) {
        if (closed) return;
        log.info("control socket {}: {} {} in time: closed", path(), peer != null ? peer : "a peer", what);
        closeQuietly(ch);
    }

    /** One line to a peer turned away on accept, without waiting: a fresh socket's buffer always takes it. */
    private static void sendAndClose(SocketChannel ch, Reply reply) {
        try (ch) {
            ch.configureBlocking(false);
            ch.write(ByteBuffer.wrap((ControlProtocol.encode(reply) + "\n").getBytes(StandardCharsets.UTF_8)));
        } catch (IOException e) {
            // gone already
        }
    }

    private static void pause() {
        try {
            Thread.sleep(100);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void closeQuietly(SocketChannel ch) {
        try {
            ch.close();
        } catch (IOException e) {
            // nothing left to do with it
        }
    }

    /**
     * Stops listening, closes every peer's connection, waits (up to {@link #REPLY_TIMEOUT}) for a change already
     * under way to finish, and removes the socket file.
     */
    @Override
    public void close() {
        Thread accepting;
        synchronized (this) {
            if (closed) return;
            closed = true;
            accepting = acceptor;
        }
        file.remove();
        try {
            file.channel().close();
        } catch (IOException e) {
            log.warn("control socket {}: close failed: {}", path(), e.toString());
        }
        for (SocketChannel ch : open) closeQuietly(ch);
        long until = System.nanoTime() + REPLY_TIMEOUT.toNanos();
        try {
            if (accepting != null) accepting.join(REPLY_TIMEOUT);
            List<Thread> toJoin;
            synchronized (running) {
                toJoin = List.copyOf(running);
            }
            for (Thread t : toJoin) {
                long left = until - System.nanoTime();
                if (left <= 0 || !t.join(Duration.ofNanos(left))) {
                    log.warn("control socket {}: a request still running at close: the exports close under it", path());
                    break;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        timer.shutdownNow();
    }
}
