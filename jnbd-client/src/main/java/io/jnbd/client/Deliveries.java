package io.jnbd.client;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;

/**
 * Outcomes a thread decided while it held one of the client's locks, delivered once it holds none.
 *
 * <p>Completing a future runs the callbacks attached to it then and there, and a callback may submit a request
 * and wait for it. Run under a sender's lock, such a callback stalled the connection: the request it waited
 * for could only be sent by taking that lock. So a thread that takes a lock counts it here, and a delivery it
 * makes meanwhile waits in its list until the count is back to zero. A connection's sender thread never
 * delivers on itself at all, since a callback waiting there would wait for the very thread that sends its
 * request: each batch it lets go of runs on a new virtual thread (not one shared thread, on which one waiting
 * callback would hold up the outcome it waits for).
 *
 * <p>Per thread, so that the locks of several connections (a splice holds the destination's while the
 * source's reader submits) count together.
 */
final class Deliveries {

    private static final ThreadLocal<Deliveries> OF_THREAD = new ThreadLocal<>();

    private final ArrayDeque<Runnable> held = new ArrayDeque<>();
    /** Names the virtual threads this thread's deliveries run on; null to run them on this thread. */
    private final String handOffName;
    private int locks;

    private Deliveries(String handOffName) {
        this.handOffName = handOffName;
    }

    /** Makes the calling thread (a sender thread) hand every delivery to a new virtual thread named {@code name}. */
    static void handOffFromThisThread(String name) {
        OF_THREAD.set(new Deliveries(name));
    }

    /** The calling thread has taken a lock of the client. */
    static void locked() {
        Deliveries d = OF_THREAD.get();
        if (d == null) OF_THREAD.set(d = new Deliveries(null));
        d.locks++;
    }

    /** The calling thread has let go of a lock of the client: with none left, what it held back is delivered. */
    static void unlocked() {
        Deliveries d = OF_THREAD.get();
        if (--d.locks == 0 && !d.held.isEmpty()) d.flush();
    }

    /**
     * The calling thread's list if a delivery it makes now must wait in it: the thread holds a lock of the
     * client, or hands its deliveries off. Null, as on every thread most of the time, to deliver at once.
     */
    static Deliveries ofHoldingThread() {
        Deliveries d = OF_THREAD.get();
        return d == null || (d.locks == 0 && d.handOffName == null) ? null : d;
    }

    /**
     * Adds a delivery, run once the thread holds no lock (at once, on a thread that hands off and holds none).
     * Only on the thread whose list it is.
     */
    void add(Runnable delivery) {
        held.add(delivery);
        if (locks == 0) flush();
    }

    private void flush() {
        if (handOffName != null) {
            List<Runnable> batch = new ArrayList<>(held);
            held.clear();
            Thread.ofVirtual().name(handOffName).start(() -> batch.forEach(Runnable::run));
            return;
        }
        // A callback run here may take and let go of a lock again, and so deliver the rest itself: each
        // delivery is taken off the list before it runs.
        for (Runnable r; (r = held.poll()) != null; ) r.run();
    }
}
