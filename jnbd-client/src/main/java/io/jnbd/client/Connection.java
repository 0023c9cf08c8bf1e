package io.jnbd.client;

import io.jnbd.protocol.Nbd;

import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One NBD connection in the transmission phase: a {@link Sender} that any thread submits to without ever
 * waiting, a {@link Receiver} on one reader thread, and the bookkeeping between them: requests in flight by
 * cookie, their timeouts, and how outcomes reach the futures.
 */
final class Connection implements Lane {

    private final Transport transport;
    private final String peer;
    private final ExportInfo info;
    /** The negotiated metadata contexts, in the server's order; their ids are this connection's own. */
    private final java.util.List<String> metaContexts;
    private final long requestTimeoutNanos;
    /** Looks for requests past their deadline; null without a request timeout. */
    private final ScheduledFuture<?> sweeper;
    /** Where futures are completed; null for the thread that decided the outcome (usually the reader). */
    private final Executor completionExecutor;
    private final Map<Long, Pending> inFlight = new ConcurrentHashMap<>();
    private final AtomicLong nextCookie = new AtomicLong(1);
    private final Sender sender;
    private final Thread reader;
    /** Requests and their outcomes, in pairs, that the reader decided and {@link #deliverHeld} completes. */
    private final java.util.ArrayList<Object> readerHeld = new java.util.ArrayList<>();
    /** Set once, when the connection dies; every later submission fails with it. */
    private volatile NbdException failure;
    /** Told once the connection has died (a {@link Redial} then puts another in its place); null if no one asks. */
    private volatile java.util.function.Consumer<NbdException> failureListener;
    /** The server's identity of the export's data ({@code jnbd:identity:<hex>}), if it was asked and named one. */
    private final String identity;

    @Override
    public SocketChannel channel() {
        return transport.socket;
    }

    Connection(String peer, Handshake.Result handshake, ScheduledExecutorService timer, ClientOptions options, int index) {
        this.transport = handshake.transport();
        this.peer = peer;
        this.info = handshake.info();
        this.identity = handshake.identity();
        this.metaContexts = java.util.List.copyOf(handshake.contexts().values());
        this.requestTimeoutNanos = options.requestTimeout().toNanos();
        this.completionExecutor = options.completionExecutor();
        this.sender = new Sender(this, transport, options.requestsInFlight(), peer + "#" + index);
        Receiver receiver = new Receiver(this, transport, peer, info, handshake.contexts());
        this.reader = Thread.ofPlatform().daemon().name("jnbd-reader-" + peer + "#" + index).unstarted(receiver::run);
        reader.start();
        sender.start(reader);
        if (requestTimeoutNanos > 0) {
            // One periodic sweep rather than a timer task per request: scheduling and cancelling a task for
            // every request costs the submitter, and a cancelled task stays queued (holding the request and
            // its buffer) until it would have fired. Timeouts fire up to one tick late.
            long tick = Math.clamp(requestTimeoutNanos / 16, TimeUnit.MILLISECONDS.toNanos(1), TimeUnit.SECONDS.toNanos(1));
            this.sweeper = timer.scheduleWithFixedDelay(this::expire, tick, tick, TimeUnit.NANOSECONDS);
        } else {
            this.sweeper = null;
        }
    }

    @Override
    public ExportInfo info() {
        return info;
    }

    @Override
    public java.util.List<String> metaContexts() {
        return metaContexts;
    }

    String peer() {
        return peer;
    }

    /** The negotiated TLS protocol and cipher suite, or null over a plain connection. */
    @Override
    public String tls() {
        return transport.tls();
    }

    /** Requests in flight: sent and not yet answered. */
    int inFlight() {
        return inFlight.size();
    }

    /** Requests in flight or waiting to be sent, to pick the least busy connection. */
    @Override
    public int load() {
        return inFlight.size() + sender.queued();
    }

    /** Whether the calling thread holds this connection's monitor or its sender's lock. */
    @Override
    public boolean lockedByCurrentThread() {
        return Thread.holdsLock(this) || sender.lockedByCurrentThread();
    }

    @Override
    public boolean alive() {
        return failure == null;
    }

    /**
     * Submits one request and returns at once, whatever the state of the window or the socket. {@code data}
     * is the destination of a READ (filled between its position and limit, which are left unchanged) or the
     * payload of a WRITE; null otherwise.
     */
    @Override
    public CompletableFuture<Object> submit(int type, int flags, long offset, long length, ByteBuffer data) {
        return submit(new Pending(type, flags, offset, length, data, null, nextCookie.getAndIncrement()));
    }

    /** Submits a WRITE whose payload is {@code length} bytes of {@code file}, as {@link #submit(int, int, long, long, ByteBuffer)}. */
    @Override
    public CompletableFuture<Object> submitWrite(int flags, long offset, long length, Pending.FileRegion file) {
        return submit(new Pending(Nbd.CMD_WRITE, flags, offset, length, null, file, nextCookie.getAndIncrement()));
    }

    /** Submits a READ whose data goes to {@code sink} chunk by chunk, as {@link #submit(int, int, long, long, ByteBuffer)}. */
    @Override
    public CompletableFuture<Object> submitRead(long offset, long length, ReadSink sink) {
        return submit(new Pending(Nbd.CMD_READ, 0, offset, length, null, null, sink, nextCookie.getAndIncrement()));
    }

    /**
     * Sends a WRITE whose payload {@code streamer} puts into the socket, now, on the calling thread (see
     * {@link Sender#writeNow}). Null if the payload was not taken (the connection is dead, or no slot came
     * free before the request timeout); the caller still owns it then.
     */
    @Override
    public CompletableFuture<Object> writeNow(int flags, long offset, long length, Sender.Streamer streamer) throws java.io.IOException {
        Pending p = new Pending(Nbd.CMD_WRITE, flags, offset, length, null, null, nextCookie.getAndIncrement());
        p.deadline = System.nanoTime() + requestTimeoutNanos;
        if (failure == null && sender.writeNow(p, streamer)) return p.future;
        abandon(p);
        return null;
    }

    /** Gives a request that was never sent the connection's failure, or a timeout, unless it has an outcome. */
    void abandon(Pending p) {
        NbdException why = failure;
        if (why == null) {
            why = new NbdTimeoutException(p.describe() + " to " + peer + " was not sent within "
                + TimeUnit.NANOSECONDS.toMillis(requestTimeoutNanos) + " ms: all request slots stayed taken");
        }
        if (p.settle(why) == Pending.Settled.UNSENT) deliver(p, why);
    }

    boolean pastDeadline(Pending p) {
        return requestTimeoutNanos > 0 && System.nanoTime() - p.deadline >= 0;
    }

    /** Whether this connection can be spliced from or into: a plain socket with a descriptor to hand. */
    @Override
    public boolean spliceable() {
        return transport instanceof Transport.Plain && Splice.AVAILABLE && Splice.fd(transport.socket) >= 0;
    }

    private CompletableFuture<Object> submit(Pending p) {
        NbdException dead = failure;
        if (dead != null) {
            p.settle(dead);
            deliver(p, dead);
            return p.future;
        }
        // From submission: the time spent waiting in the queue counts.
        p.deadline = System.nanoTime() + requestTimeoutNanos;
        sender.submit(p);
        if (failure != null) failQueued(failure); // raced with fail(), whose sweep may have run before the enqueue
        return p.future;
    }

    /**
     * The reader thread is about to wait: completes the futures of the replies it read meanwhile, then sends what
     * their callbacks (and it) submitted (see {@link Sender#uncork}).
     */
    void uncork() {
        deliverHeld();
        sender.uncork();
        deliverHeld(); // a send that failed decided outcomes too
    }

    /**
     * Completes, in one go, the futures whose outcomes the reader decided since it last waited: one task for the
     * completion executor rather than one per reply, so that what their callbacks do can be done together too
     * (the nbd: proxy sends the replies of a batch in one write). Only on the reader thread.
     */
    void deliverHeld() {
        // A callback run here may decide more outcomes on this thread (a request it submits to a dead
        // connection fails at once): they are delivered too before the reader waits, or ends.
        while (!readerHeld.isEmpty()) {
            Object[] batch = readerHeld.toArray();
            readerHeld.clear();
            Runnable all = () -> {
                for (int i = 0; i < batch.length; i += 2) complete((Pending) batch[i], batch[i + 1]);
            };
            Executor executor = completionExecutor;
            if (executor != null) {
                try {
                    executor.execute(all);
                    continue;
                } catch (RuntimeException e) {
                    // As in deliverNow: never leave the callers waiting.
                }
            }
            all.run();
        }
    }

    /** Puts a request about to be written into the map of those in flight; false if the connection has died. */
    boolean register(Pending p) {
        inFlight.put(p.cookie, p);
        NbdException dead = failure;
        if (dead != null) {
            // Lost the race with a connection failure that already swept the map.
            finish(p, dead);
            return false;
        }
        return true;
    }

    Pending lookup(long cookie) {
        return inFlight.get(cookie);
    }

    /** Runs on the timer thread: times out every request past its deadline, queued or in flight. */
    private void expire() {
        try {
            long now = System.nanoTime();
            for (Pending p : inFlight.values()) expire(p, now);
            sender.forEachQueued(p -> expire(p, now));
        } catch (RuntimeException e) {
            // An exception would silently end the periodic task, and with it every timeout on this connection.
            fail(new NbdConnectionException("client bug while timing out requests to " + peer + ": " + e, e));
        }
    }

    private void expire(Pending p, long now) {
        if (!p.timedOut) {
            if (now - p.deadline >= 0) {
                p.timedOut = true;
                timeOut(p, now);
            }
        } else if (p.stallDeadline != 0 && now - p.stallDeadline >= 0 && p.heldSettled()) {
            // A write that never finishes or a reply that stops mid-chunk would hold the caller for ever.
            p.stallDeadline = 0;
            fail(new NbdConnectionException("connection to " + peer + " closed: " + p.describe()
                + " stalled in the middle of its data", null));
        }
    }

    private void timeOut(Pending p, long now) {
        long ms = TimeUnit.NANOSECONDS.toMillis(requestTimeoutNanos);
        NbdTimeoutException e = new NbdTimeoutException(p.describe() + " to " + peer + " got no reply within " + ms + " ms");
        switch (p.settle(e)) {
            case UNSENT -> {
                sender.forget(p);
                deliver(p, new NbdTimeoutException(p.describe() + " to " + peer + " was not sent within " + ms
                    + " ms: all " + "request slots stayed taken"));
                return;
            }
            // The reply may still come: the entry stays so that the reader can drain it.
            case NOW -> deliver(p, e);
            // The sender or the reader is in the middle of the buffer: the holder delivers the timeout when it is
            // done, unless it never is.
            case HELD -> p.stallDeadline = now + requestTimeoutNanos;
            case ALREADY -> {
                return;
            }
        }
        if (!p.sent) {
            // Still stuck in the socket write: the server has stopped reading. Only closing the channel frees
            // the sender thread.
            fail(new NbdConnectionException("connection to " + peer + " closed: the server stopped reading requests ("
                + e.getMessage() + ")", e));
        }
    }

    /** Sends DISC after the requests in flight have been answered (or {@code graceMillis} passed), then closes. */
    @Override
    public void close(long graceMillis) {
        long until = System.currentTimeMillis() + graceMillis;
        // Requests already timed out are not waited for: their caller has been told, the server may be stuck.
        while (failure == null && System.currentTimeMillis() < until
               && (sender.hasWaiting() || inFlight.values().stream().anyMatch(p -> !p.settled()))) {
            try {
                Thread.sleep(5);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
        if (failure == null) sender.disconnect(Math.max(0, until - System.currentTimeMillis()));
        fail(new NbdConnectionException("connection to " + peer + " was closed by the client", null));
        try {
            reader.join(1000);
            sender.join(1000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Closes the connection and fails every request in flight or queued with {@code cause}. Idempotent. */
    void fail(NbdException cause) {
        synchronized (this) {
            if (failure != null) return;
            failure = cause;
        }
        // Only the socket is closed, not the TLS session: its close_notify is a write, which may block, and the
        // sender thread may be in the middle of one.
        transport.close();
        if (sweeper != null) sweeper.cancel(false);
        // A request whose buffer the sender or reader holds gets the failure from the holder, once its
        // write or read has failed on the closed channel.
        for (Pending p : inFlight.values()) finish(p, cause);
        failQueued(cause);
        sender.wake();
        var listener = failureListener;
        if (listener != null) listener.accept(cause);
    }

    /** Tells {@code listener} when the connection dies, at once if it has. It may be told twice. */
    void onFailure(java.util.function.Consumer<NbdException> listener) {
        failureListener = listener;
        NbdException dead = failure;
        if (dead != null) listener.accept(dead);
    }

    /** Why the connection died, or null while it lives. */
    NbdException failure() {
        return failure;
    }

    String identity() {
        return identity;
    }

    private void failQueued(NbdException cause) {
        for (Pending p; (p = sender.poll()) != null; ) {
            if (p.settle(cause) == Pending.Settled.UNSENT) deliver(p, cause);
        }
    }

    /** Removes the request and frees its slot exactly once, then delivers the outcome unless one was already. */
    void finish(Pending p, Object outcome) {
        if (inFlight.remove(p.cookie) == null) return;
        sender.answered(p);
        if (p.settle(outcome) == Pending.Settled.NOW) deliver(p, outcome);
    }

    /** Ends the sender's or reader's hold on the buffer, delivering an outcome decided meanwhile. */
    void letGo(Pending p) {
        Object outcome = p.release();
        if (outcome != Pending.OPEN) deliver(p, outcome);
    }

    /**
     * Completes the future with a decided outcome (a Throwable for failure, else the result): on the completion
     * executor if there is one, else on this thread; in either case only once this thread holds no lock of the
     * client, and never on the sender thread (see {@link Deliveries}). The reader's outcomes wait until it is
     * about to wait for the server ({@link #deliverHeld}).
     */
    void deliver(Pending p, Object outcome) {
        Deliveries later = Deliveries.ofHoldingThread();
        if (later != null) {
            later.add(() -> deliverNow(p, outcome));
        } else {
            deliverNow(p, outcome);
        }
    }

    private void deliverNow(Pending p, Object outcome) {
        if (Thread.currentThread() == reader) {
            readerHeld.add(p);
            readerHeld.add(outcome);
            return;
        }
        Executor executor = completionExecutor;
        if (executor != null) {
            try {
                executor.execute(() -> complete(p, outcome));
                return;
            } catch (RuntimeException e) {
                // A shut-down (or broken) executor must not leave the caller waiting for ever, nor cut short a
                // batch of held-back deliveries.
            }
        }
        complete(p, outcome);
    }

    private static void complete(Pending p, Object outcome) {
        if (outcome instanceof Throwable t) {
            p.future.completeExceptionally(t);
        } else {
            p.future.complete(outcome);
        }
    }
}
