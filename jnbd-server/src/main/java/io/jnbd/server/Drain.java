package io.jnbd.server;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How a stopping server lets its clients go (the spec's "Terminating the transmission phase": wait for the
 * requests in flight, answer later ones with {@code NBD_ESHUTDOWN}, then disconnect). The listeners are already
 * closed when it begins, and from that moment every request a connection reads is refused with
 * {@code NBD_ESHUTDOWN} (Connection#refuse) and every option of a client still in its handshake with
 * {@code NBD_REP_ERR_SHUTDOWN}. Then, each connection on its own:
 * <ol>
 * <li>once every request it had read before the drain began is answered (those are the requests in its window
 *     at the start, since a request takes its window share before it looks at the drain), it stops reading,
 *     sends what it owes, flushes its view of the export, and closes, TLS's close_notify last: a client that is
 *     slow or stuck holds up no other;</li>
 * <li>a client still in its handshake (a TLS handshake included) is closed as it is, once the connections in
 *     transmission are done.</li>
 * </ol>
 * Then every export is flushed and closed. The timeout or {@link #cutShort} (a second signal) ends the waiting at
 * once: the connections left are closed as they are, and the exports are still flushed and closed.
 */
final class Drain {
    private static final Logger log = LoggerFactory.getLogger(Drain.class);
    private static final long POLL_MILLIS = 10;

    private final LongAdder refused = new LongAdder();
    private volatile boolean cutShort;
    private volatile Outcome outcome;

    /** A request was answered NBD_ESHUTDOWN. */
    void refused() {
        refused.increment();
    }

    /** Ends a drain in progress (or the next one) at once: a second SIGTERM. */
    void cutShort() {
        cutShort = true;
    }

    /** What a drain did, as its log line says it. */
    record Outcome(int connections, long answered, long refused, int abandoned, boolean flushed, long millis,
                   String cutBy) {
        String describe() {
            String head = cutBy == null ? "drain" : "drain " + cutBy;
            return head + ": " + connections + " connection" + (connections == 1 ? "" : "s") + ", "
                + answered + " request" + (answered == 1 ? "" : "s") + " answered, " + refused
                + " refused with ESHUTDOWN"
                + (abandoned > 0 ? ", " + abandoned + " connection" + (abandoned == 1 ? "" : "s")
                    + " closed with requests still in flight" : "")
                + (flushed ? ", exports flushed" : ", an export's flush failed") + ", in " + millis + " ms";
        }
    }

    /**
     * Drains {@code connections} (the server's live set, which connections leave as they end) within
     * {@code timeout}, then flushes and closes the exports of {@code exports}; logs and returns what it did.
     */
    Outcome run(Collection<Connection> connections, ExportRegistry exports, Duration timeout) {
        long start = System.nanoTime();
        long deadline = start + Math.max(0, timeout.toNanos());
        int transmitting = 0;
        long atStart = 0;
        Map<Connection, Integer> waiting = new HashMap<>();
        for (Connection c : connections) {
            if (!c.inTransmission()) continue;
            transmitting++;
            int n = c.requestsInFlight();
            if (n > 0) {
                waiting.put(c, n);
                atStart += n;
            }
        }
        log.info("drain: {} connection{} with {} request{} in flight; requests read from now on get ESHUTDOWN (timeout {} ms)",
            transmitting, transmitting == 1 ? "" : "s", atStart, atStart == 1 ? "" : "s", timeout.toMillis());
        Set<Connection> closing = new HashSet<>();
        while (true) {
            for (Connection c : connections) {
                if (c.inTransmission() && !closing.contains(c) && c.requestsInFlight() == 0) {
                    c.stopReading();
                    closing.add(c);
                    waiting.remove(c);
                }
            }
            waiting.keySet().removeIf(c -> !connections.contains(c));
            if (waiting.isEmpty() || cutShort || System.nanoTime() >= deadline) break;
            pause();
        }
        String cutBy = waiting.isEmpty() ? null
            : cutShort ? "cut short by a second signal" : "timed out after " + timeout.toMillis() + " ms";
        long unanswered = 0;
        for (Map.Entry<Connection, Integer> w : waiting.entrySet()) {
            unanswered += Math.min(w.getKey().requestsInFlight(), w.getValue());
            log.warn("{}: requests still in flight when the drain ended, closing", w.getKey().peer());
            w.getKey().abort();
            closing.add(w.getKey());
        }
        close(connections, closing, deadline);
        boolean flushed = closeExports(exports);
        var outcome = new Outcome(transmitting, atStart - unanswered, refused.sum(), waiting.size(), flushed,
            TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start), cutBy);
        if (cutBy == null && flushed) log.info(outcome.describe());
        else log.warn(outcome.describe());
        this.outcome = outcome;
        return outcome;
    }

    /** What the drain did, once it is over; null before. */
    Outcome outcome() {
        return outcome;
    }

    /**
     * Ends the connections not yet {@code closing}: those in their handshake, and any that reached transmission
     * since; then waits for every one to be gone, cutting what is still open at the deadline (or at once, after a
     * second signal).
     */
    private void close(Collection<Connection> connections, Set<Connection> closing, long deadline) {
        for (Connection c : connections) {
            if (!closing.contains(c)) c.stopReading();
        }
        while (!connections.isEmpty() && !cutShort && System.nanoTime() < deadline) pause();
        List<Connection> left = new ArrayList<>(connections);
        for (Connection c : left) {
            log.warn("{}: not closed by the end of the drain, cutting it", c.peer());
            c.abort();
        }
    }

    /** Flushes and closes every export still open; false if a flush failed. */
    private static boolean closeExports(ExportRegistry exports) {
        boolean all = true;
        for (Export e : exports.stop()) {
            try {
                e.backend().flush();
                e.backend().close();
            } catch (IOException | RuntimeException ex) {
                all = false;
                log.error("export '{}': flush on shutdown failed: {}", e.name(), ex.toString());
            }
        }
        return all;
    }

    /** Waits a moment; an interrupt ends the drain as a second signal would. */
    private void pause() {
        try {
            Thread.sleep(POLL_MILLIS);
        } catch (InterruptedException e) {
            cutShort = true;
            Thread.currentThread().interrupt();
        }
    }
}
