package io.jnbd.server;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How a stopping server lets its clients go (the spec's "Terminating the transmission phase": wait for the
 * requests in flight, answer later ones with {@code NBD_ESHUTDOWN}, then disconnect). The listeners are already
 * closed when it begins, and from that moment every request a connection reads is refused with
 * {@code NBD_ESHUTDOWN} (Connection#refuse) and every option of a client still in its handshake with
 * {@code NBD_REP_ERR_SHUTDOWN}. The drain then:
 * <ol>
 * <li>waits until every request read before it began has been answered: those are the requests in the
 *     connections' windows at its start, since a request takes its window share before it looks at the drain;</li>
 * <li>flushes every export, so that what a client was told is written is on disk when it sees the
 *     disconnect;</li>
 * <li>closes every connection: its replies leave first, then TLS's close_notify; clients still in their
 *     handshake (a TLS handshake included) are closed without waiting for them.</li>
 * </ol>
 * The timeout or {@link #cutShort} (a second signal) ends the wait at once: every connection is closed as it is,
 * and the server goes on to flush and close its exports as it always does.
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
                + (flushed ? ", exports flushed" : "") + ", in " + millis + " ms";
        }
    }

    /**
     * Drains {@code connections} (the server's live set, which connections leave as they end) within
     * {@code timeout}, flushing {@code exports} once their requests are answered; logs and returns what it did.
     */
    Outcome run(Collection<Connection> connections, Collection<Export> exports, Duration timeout) {
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
        while (!waiting.isEmpty() && !cutShort && System.nanoTime() < deadline) {
            waiting.keySet().removeIf(c -> c.requestsInFlight() == 0 || !connections.contains(c));
            if (!waiting.isEmpty()) pause();
        }
        waiting.keySet().removeIf(c -> c.requestsInFlight() == 0 || !connections.contains(c));
        String cutBy = waiting.isEmpty() ? null
            : cutShort ? "cut short by a second signal" : "timed out after " + timeout.toMillis() + " ms";
        long unanswered = 0;
        for (Connection c : waiting.keySet()) unanswered += Math.min(c.requestsInFlight(), waiting.get(c));
        boolean flushed = false;
        if (cutBy == null) {
            flushed = flush(exports);
            close(connections, deadline);
        } else {
            for (Connection c : connections) {
                if (waiting.containsKey(c)) log.warn("{}: requests still in flight when the drain ended, closing", c.peer());
                c.abort();
            }
        }
        var outcome = new Outcome(transmitting, atStart - unanswered, refused.sum(), waiting.size(), flushed,
            TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start), cutBy);
        if (cutBy == null) log.info(outcome.describe());
        else log.warn(outcome.describe());
        this.outcome = outcome;
        return outcome;
    }

    /** What the drain did, once it is over; null before. */
    Outcome outcome() {
        return outcome;
    }

    private static boolean flush(Collection<Export> exports) {
        boolean all = true;
        for (Export e : exports) {
            try {
                e.backend().flush();
            } catch (IOException | RuntimeException ex) {
                all = false;
                log.error("export '{}': flush during the drain failed: {}", e.name(), ex.toString());
            }
        }
        return all;
    }

    /**
     * Ends every connection: one in transmission stops reading, sends what it owes and closes (TLS's close_notify
     * first); one in its handshake is closed as it is. What is still open at the deadline is cut.
     */
    private void close(Collection<Connection> connections, long deadline) {
        for (Connection c : connections) c.stopReading();
        while (!connections.isEmpty() && !cutShort && System.nanoTime() < deadline) pause();
        List<Connection> left = new ArrayList<>(connections);
        for (Connection c : left) {
            log.warn("{}: not closed by the end of the drain, cutting it", c.peer());
            c.abort();
        }
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
