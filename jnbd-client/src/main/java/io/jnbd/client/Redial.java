package io.jnbd.client;

import io.jnbd.protocol.Nbd;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.PriorityQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiConsumer;

/**
 * A lane that outlives its connection ({@link ClientOptions#withReconnect}): when the connection drops, or the server
 * answers {@code NBD_ESHUTDOWN}, a dialer thread connects again with growing pauses, checks that the server came back
 * with the same export, and sends again every request that got no answer, before anything submitted later.
 *
 * <p>Each connection is a {@link Generation}. A request enters the live generation and is submitted to its
 * connection as usual; its outcome comes back through {@link Retry#accept}. A lost outcome parks the request instead
 * of failing it; so does a submission while no generation is live. The dialer waits until every request that entered
 * the dead generation has its outcome (so that all the lost ones are parked), then submits the parked requests to the
 * new connection in submission order, and only then makes it live: no later request can overtake one sent again.
 *
 * <pre>
 *   live(g) --lost outcome / failure / ESHUTDOWN--> dialing --same export--> refilling(g') --parked empty--> live(g')
 *   dialing --delay passed / other export / TLS files unusable--> failed (every parked and later request fails)
 *   refilling(g') --g' lost--> dialing (the same deadline)          any --close--> closed
 * </pre>
 *
 * <p>With reconnecting off, {@link NbdClient} uses the {@link Connection} itself: none of this costs it anything.
 */
final class Redial implements Lane {

    /** Opens a connection to the same export with the given bound on connecting plus the handshake. */
    interface Opener {
        Connection open(java.time.Duration connectTimeout) throws IOException;
    }

    private static final long FIRST_PAUSE_NANOS = TimeUnit.MILLISECONDS.toNanos(10);
    /** Pauses double up to this: a restarting server is usually back within a second or two. */
    private static final long MAX_PAUSE_NANOS = TimeUnit.SECONDS.toNanos(1);
    /** Load reported while there is no connection, so that a client with others sends there meanwhile. */
    private static final int BUSY = Integer.MAX_VALUE / 4;

    private final Opener opener;
    private final String peer;
    private final int index;
    private final long delayNanos;
    private final java.time.Duration connectTimeout;
    /** Where the futures this lane fails itself are completed; null for the thread that learns why. */
    private final java.util.concurrent.Executor completionExecutor;
    /** What the first connection reported; every later one must match it. */
    private final SameExport expected;
    private final String tls;
    private final AtomicLong nextSeq = new AtomicLong();
    /** Requests sent on a new connection after waiting for it (lost with the old one, or made while away): for tests. */
    private final AtomicLong resent = new AtomicLong();

    private final Object lock = new Object();
    /** Requests waiting for a connection, in submission order. Guarded by {@link #lock}. */
    private final PriorityQueue<Retry> parked = new PriorityQueue<>(Comparator.comparingLong(r -> r.seq));
    /** The generation requests go to; null while dialing and once failed or closed. Written under {@link #lock}. */
    private volatile Generation live;
    /** The newest generation, live or being refilled. Guarded by {@link #lock}. */
    private Generation newest;
    /** Why every request now fails: the server stayed away, came back different, or the client closed. */
    private volatile NbdException failure;
    private volatile boolean closed;
    /** Guarded by {@link #lock}. */
    private Thread dialer;

    Redial(Connection first, Opener opener, String peer, int index, ClientOptions options) {
        this.opener = opener;
        this.peer = peer;
        this.index = index;
        this.delayNanos = options.reconnectDelay().toNanos();
        this.connectTimeout = options.connectTimeout();
        this.completionExecutor = options.completionExecutor();
        this.expected = new SameExport(first);
        this.tls = first.tls();
        Generation g = new Generation(first);
        this.newest = g;
        this.live = g;
        first.onFailure(e -> lost(g, e));
    }

    // ---- submitting ----

    @Override
    public CompletableFuture<Object> submit(int type, int flags, long offset, long length, ByteBuffer data) {
        return send(new Retry(this, nextSeq.getAndIncrement(), type, flags, offset, length, data, null, null));
    }

    @Override
    public CompletableFuture<Object> submitWrite(int flags, long offset, long length, Pending.FileRegion file) {
        return send(new Retry(this, nextSeq.getAndIncrement(), Nbd.CMD_WRITE, flags, offset, length, null, file, null));
    }

    @Override
    public CompletableFuture<Object> submitRead(long offset, long length, ReadSink sink) {
        return send(new Retry(this, nextSeq.getAndIncrement(), Nbd.CMD_READ, 0, offset, length, null, null, sink));
    }

    /** Never called: a payload streamed from another socket cannot be sent twice, so this lane is not spliceable. */
    @Override
    public CompletableFuture<Object> writeNow(int flags, long offset, long length, Sender.Streamer streamer) {
        throw new IllegalStateException("a reconnecting connection does not take spliced writes");
    }

    private Retry send(Retry r) {
        Generation g = live;
        if (g != null && g.enter()) {
            submitTo(g, r);
        } else {
            park(r);
        }
        return r;
    }

    /** The slow way in: no live connection as the request came, so it waits for one, or fails. */
    private void park(Retry r) {
        Generation g;
        NbdException why;
        synchronized (lock) {
            why = failure;
            g = live;
            if (why == null && (g == null || !g.enter())) {
                parked.add(r);
                return;
            }
        }
        if (why != null) {
            r.completeExceptionally(why);
        } else {
            submitTo(g, r);
        }
    }

    private static void submitTo(Generation g, Retry r) {
        r.on = g;
        Connection c = g.connection;
        CompletableFuture<Object> f;
        if (r.file != null) {
            f = c.submitWrite(r.flags, r.offset, r.length, r.file);
        } else if (r.sink != null) {
            f = c.submitRead(r.offset, r.length, r.sink);
        } else {
            f = c.submit(r.type, r.flags, r.offset, r.length, r.data);
        }
        f.whenComplete(r);
    }

    /** A request's outcome on its generation's connection. The generation is left before any caller hears of it. */
    private void outcome(Retry r, Object result, Throwable error) {
        Generation g = r.on;
        Throwable cause = error == null ? null : NbdClient.unwrap(error);
        if (cause != null && !closed && lostWith(cause)) {
            NbdException why;
            synchronized (lock) {
                why = failure;
                if (why == null) parked.add(r);
            }
            lost(g, (NbdException) cause);
            g.exit(this);
            if (why != null) r.completeExceptionally(why);
            return;
        }
        g.exit(this);
        if (cause != null) {
            r.completeExceptionally(cause);
        } else {
            r.complete(result);
        }
    }

    /**
     * The connection is gone, or going: the server closed or reset it, or it failed under us (an NbdConnectionException,
     * never a server's error reply or a protocol violation), or the server said {@code NBD_ESHUTDOWN}, the spec's "go
     * away and come back". A timed-out request is the caller's to hear about, not a reason to reconnect.
     */
    private static boolean lostWith(Throwable cause) {
        return cause instanceof NbdConnectionException
            || cause instanceof NbdErrorException e && e.error() == Nbd.ESHUTDOWN;
    }

    // ---- reconnecting ----

    /** Generation {@code g} is gone: no request enters it any more, and the dialer starts unless it runs already. */
    private void lost(Generation g, NbdException cause) {
        if (!lostWith(cause) || closed) return;
        synchronized (lock) {
            if (g.dead || failure != null) return;
            g.dead = true;
            g.cause = cause;
            g.close();
            if (live == g) live = null;
            lock.notifyAll();
            if (dialer != null) return; // it is refilling a newer one, and notices
            Generation from = g;
            dialer = Thread.ofPlatform().daemon().name("jnbd-redial-" + peer + "#" + index).start(() -> redial(from));
        }
    }

    private void redial(Generation first) {
        long deadline = System.nanoTime() + delayNanos;
        Generation dead = first;
        try {
            while (true) {
                awaitDrained(dead, deadline);
                dead.connection.close(0);
                Connection c = dial(dead.cause, deadline);
                Generation g = new Generation(c);
                synchronized (lock) {
                    newest = g;
                }
                c.onFailure(e -> lost(g, e));
                if (refill(g)) return;
                dead = g;
            }
        } catch (NbdException e) {
            giveUp(e);
        } catch (RuntimeException | Error e) {
            giveUp(new NbdConnectionException("client bug while reconnecting to " + peer + ": " + e, e));
            throw e;
        }
    }

    /**
     * Sends the parked requests to {@code g} in submission order until none is left, then makes it live; true if it
     * did, false if {@code g} was lost meanwhile (its requests are parked again, or will be as their outcomes come).
     */
    private boolean refill(Generation g) throws NbdException {
        while (true) {
            List<Retry> batch = new ArrayList<>();
            boolean closing;
            synchronized (lock) {
                closing = closed;
                if (!closing && g.dead) return false;
                if (!closing && parked.isEmpty()) {
                    live = g;
                    dialer = null;
                    return true;
                }
                if (!closing) {
                    for (Retry r; (r = parked.poll()) != null; ) batch.add(r);
                }
            }
            if (closing) {
                // Outside the lock: closing completes futures, whose callbacks must not run holding it.
                g.close();
                g.connection.close(0);
                throw closedException();
            }
            for (int i = 0; i < batch.size(); i++) {
                if (!g.enter()) {
                    synchronized (lock) {
                        parked.addAll(batch.subList(i, batch.size()));
                    }
                    break;
                }
                submitTo(g, batch.get(i));
                resent.incrementAndGet();
            }
        }
    }

    /**
     * Waits until every request that entered {@code g} has its outcome, so that all the lost ones are parked. A
     * dropped connection gives them at once; after ESHUTDOWN the server answers those it had read, then closes.
     */
    private void awaitDrained(Generation g, long deadline) throws NbdException {
        synchronized (lock) {
            while (!g.drained() && !closed && System.nanoTime() - deadline < 0) waitUntil(deadline);
        }
        if (g.drained() || closed) return;
        // The server neither answered nor closed: closing here gives every request its outcome at once.
        g.connection.fail(new NbdConnectionException("connection to " + peer + " closed: the server said it was"
            + " shutting down but did not answer the requests it had within the reconnect delay", null));
        long bound = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        synchronized (lock) {
            while (!g.drained() && System.nanoTime() - bound < 0) waitUntil(bound);
        }
    }

    /** Connects again until the export is back, the delay passes, or it comes back as another export. */
    private Connection dial(NbdException cause, long deadline) throws NbdException {
        long pause = FIRST_PAUSE_NANOS;
        int attempts = 0;
        IOException last = null;
        while (true) {
            if (closed) throw closedException();
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                throw new NbdConnectionException("connection to " + peer + " lost (" + cause.getMessage()
                    + ") and the server did not come back within the reconnect delay of "
                    + TimeUnit.NANOSECONDS.toMillis(delayNanos) + " ms (" + attempts + " attempt(s)"
                    + (last == null ? "" : "; the last: " + last.getMessage()) + ")", last);
            }
            attempts++;
            Connection c = null;
            try {
                long bound = Math.min(connectTimeout.toNanos(), Math.max(left, TimeUnit.MILLISECONDS.toNanos(1)));
                c = opener.open(java.time.Duration.ofNanos(bound));
            } catch (NbdConfigException e) {
                throw e;
            } catch (IOException e) {
                last = e;
            }
            if (c != null) {
                String difference = expected.difference(c);
                if (difference == null) return c;
                c.close(0);
                throw new NbdConnectionException("server at " + peer + " came back with a different export: "
                    + difference + "; no request was sent to it", null);
            }
            long until = Math.min(System.nanoTime() + pause, deadline);
            synchronized (lock) {
                while (!closed && System.nanoTime() - until < 0) waitUntil(until);
            }
            pause = Math.min(pause * 2, MAX_PAUSE_NANOS);
        }
    }

    private void giveUp(NbdException why) {
        List<Retry> failed = new ArrayList<>();
        synchronized (lock) {
            if (failure == null) failure = why;
            live = null;
            dialer = null;
            for (Retry r; (r = parked.poll()) != null; ) failed.add(r);
            lock.notifyAll();
        }
        if (failed.isEmpty()) return;
        NbdException first = failure; // the first reason given wins: the client may close after giving up
        Runnable fail = () -> {
            for (Retry r : failed) r.completeExceptionally(first);
        };
        if (completionExecutor != null) {
            try {
                completionExecutor.execute(fail);
                return;
            } catch (RuntimeException e) {
                // As Connection does: a refusing executor must not leave the callers waiting.
            }
        }
        fail.run();
    }

    /** Waits on {@link #lock} (held) until {@code until} by System.nanoTime(), or a notify. */
    private void waitUntil(long until) {
        long ms = TimeUnit.NANOSECONDS.toMillis(until - System.nanoTime());
        if (ms <= 0) ms = 1;
        try {
            lock.wait(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private NbdConnectionException closedException() {
        return new NbdConnectionException("connection to " + peer + " was closed by the client", null);
    }

    long resent() {
        return resent.get();
    }

    // ---- the rest of a lane ----

    /** Whether requests have somewhere to go: a connection, or one on its way back (not one a protocol violation ended). */
    @Override
    public boolean alive() {
        if (failure != null) return false;
        Generation g = live;
        return g == null || g.connection.alive() || lostWith(g.connection.failure());
    }

    @Override
    public int load() {
        Generation g = live;
        return g == null ? BUSY : g.connection.load();
    }

    @Override
    public boolean spliceable() {
        return false;
    }

    @Override
    public String tls() {
        return tls;
    }

    @Override
    public SocketChannel channel() {
        Generation g = live;
        return g == null ? null : g.connection.channel();
    }

    @Override
    public List<String> metaContexts() {
        return expected.contexts();
    }

    @Override
    public ExportInfo info() {
        return expected.info();
    }

    @Override
    public boolean lockedByCurrentThread() {
        Generation g = live;
        return Thread.holdsLock(lock) || (g != null && g.connection.lockedByCurrentThread());
    }

    /** Closes the connection in use (after its grace) and fails what waits for one; a dialer stops at its next step. */
    @Override
    public void close(long graceMillis) {
        // First: the connection's own close fails it, which must not read as a drop to reconnect from.
        closed = true;
        Generation g;
        synchronized (lock) {
            g = newest;
        }
        g.connection.close(graceMillis);
        Thread d;
        synchronized (lock) {
            d = dialer;
            lock.notifyAll();
        }
        giveUp(closedException());
        // A callback run on the dialer (a request failed as it gave up) may be the one closing the client.
        if (d != null && d != Thread.currentThread()) {
            try {
                d.join(Math.max(1000, connectTimeout.toMillis()));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * One connection's time in the lane. {@link #entered} counts the requests submitted to it whose outcome has not
     * come back, plus {@link #CLOSED} once it is lost: from then on no request enters, and it is drained when the
     * count is down to CLOSED alone.
     */
    private static final class Generation {
        private static final int CLOSED = 1 << 30;
        final Connection connection;
        final AtomicInteger entered = new AtomicInteger();
        /** Guarded by the lane's lock. */
        boolean dead;
        NbdException cause;

        Generation(Connection connection) {
            this.connection = connection;
        }

        boolean enter() {
            for (int n = entered.get(); (n & CLOSED) == 0; n = entered.get()) {
                if (entered.compareAndSet(n, n + 1)) return true;
            }
            return false;
        }

        void exit(Redial lane) {
            if (entered.decrementAndGet() == CLOSED) {
                synchronized (lane.lock) {
                    lane.lock.notifyAll();
                }
            }
        }

        void close() {
            entered.getAndUpdate(n -> n | CLOSED);
        }

        boolean drained() {
            return entered.get() == CLOSED;
        }
    }

    /**
     * A request as the caller made it, which can be sent again; it is itself the caller's future (one object per
     * request rather than two) and the callback of each attempt's future.
     */
    private static final class Retry extends CompletableFuture<Object> implements BiConsumer<Object, Throwable> {
        final Redial lane;
        final long seq;
        final int type;
        final int flags;
        final long offset;
        final long length;
        final ByteBuffer data;
        final Pending.FileRegion file;
        final ReadSink sink;
        /** The generation of the latest attempt. */
        Generation on;

        Retry(Redial lane, long seq, int type, int flags, long offset, long length, ByteBuffer data,
              Pending.FileRegion file, ReadSink sink) {
            this.lane = lane;
            this.seq = seq;
            this.type = type;
            this.flags = flags;
            this.offset = offset;
            this.length = length;
            this.data = data;
            this.file = file;
            this.sink = sink;
        }

        @Override
        public void accept(Object result, Throwable error) {
            lane.outcome(this, result, error);
        }
    }
}
