package io.jnbd.client;

import java.util.ArrayList;

/**
 * Holds back the requests one thread submits until it says it is done, then sends them together: on each
 * connection they went to, one gathering write. For a caller that receives requests in batches and forwards
 * them (a server whose backend is another NBD server, as the memory pool's serving process is): sent one by
 * one, they cost a system call each and woke the peer for each.
 *
 * <pre>{@code
 * SendBatch.begin();
 * try {
 *     for (Request r : batch) futures.add(client.read(r.offset(), buffers.get(r)));
 * } finally {
 *     SendBatch.end(); // the reads leave here
 * }
 * }</pre>
 *
 * Begins and ends nest; the outermost end sends. A batch belongs to its thread: requests submitted on other
 * threads meanwhile are not held. A thread must not wait for a request it holds: {@link #sendHeld} first.
 */
public final class SendBatch {
    private static final ThreadLocal<SendBatch> CURRENT = new ThreadLocal<>();

    private int depth;
    /** The connections holding requests of this batch; few, so a list searched by identity. */
    private final ArrayList<Sender> holding = new ArrayList<>(4);

    private SendBatch() {
    }

    /** Starts holding back this thread's requests (or nests in the batch already begun). */
    public static void begin() {
        SendBatch b = CURRENT.get();
        if (b == null) CURRENT.set(b = new SendBatch());
        b.depth++;
    }

    /** Ends what {@link #begin} began; the outermost end sends every request held. */
    public static void end() {
        SendBatch b = CURRENT.get();
        if (b == null || b.depth == 0) throw new IllegalStateException("SendBatch.end() without begin()");
        if (--b.depth > 0) return;
        // Kept for the thread's next batch: a server's connection thread begins one per batch it reads.
        for (int i = 0; i < b.holding.size(); i++) b.holding.get(i).uncork();
        b.holding.clear();
    }

    /**
     * Sends what this thread's batch holds so far, and goes on holding what comes after: for a caller about to
     * wait for a request it submitted in the batch, which would otherwise wait for ever.
     */
    public static void sendHeld() {
        SendBatch b = current();
        if (b == null) return;
        for (int i = 0; i < b.holding.size(); i++) b.holding.get(i).uncork();
        b.holding.clear();
    }

    /** The batch open on this thread, or null. */
    static SendBatch current() {
        SendBatch b = CURRENT.get();
        return b != null && b.depth > 0 ? b : null;
    }

    void hold(Sender s) {
        for (int i = 0; i < holding.size(); i++) {
            if (holding.get(i) == s) return;
        }
        holding.add(s);
    }
}
