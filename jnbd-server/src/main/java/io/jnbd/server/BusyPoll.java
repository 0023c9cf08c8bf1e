package io.jnbd.server;

import io.jnbd.server.net.Transport;
import io.jnbd.server.net.Transports;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Polls a connection's socket for a little while before its reader goes to sleep, when that pays.
 *
 * <p>A client that sends one request at a time waits for each reply, so every request finds the reader
 * asleep; waking it costs more than serving a cached 4 KiB read (on a virtual machine an idle CPU must be
 * woken by an interrupt first: 20-40 µs here). Polling for the next request instead cuts that latency
 * by half. Polling only pays when the next request comes soon but not at once: when requests are
 * already waiting (a deep queue, a stream of large transfers) the reader rarely waits, and polling for
 * the few microseconds it does would only take CPU from the client. So a connection polls while the gaps
 * it sees average {@link #MIN_GAP_NANOS} or more, sleeps otherwise, and polls once in a while anyway to
 * notice when the pattern changes. A poll that reaches the limit empty-handed makes the next ones rarer
 * (a slow or idle client costs one wasted poll in up to 256 waits), and at most half the CPUs poll at once.
 * A poll also gives up its carrier as soon as another connection, woken for its socket, waits for one: 16
 * clients at QD1 beside 2,200 idle ones on two CPUs had a read p99 of 8.2 ms with polling that did not
 * look, 4.2-5.6 ms with polling off.
 *
 * <p>Nor does it pay after a large write payload: a client streaming large writes spends the gap copying
 * its next payload into the socket, the kernel's writeback of the last one wants a CPU as well, and the
 * wake-up a poll saves is small next to a payload's transfer. 1M writes at QD8 without polling against with
 * it (bench/ab, 23 Nov, 4 rounds): faster in 4 of 4 rounds, 1.04x median, 0.18 against 0.18-0.22 s/GB.
 */
final class BusyPoll {
    /** Below this mean gap blocking costs the client nothing noticeable: the reader is woken almost at once. */
    static final long MIN_GAP_NANOS = 5_000;
    private static final int PROBE_EVERY = 64;
    private static final int MAX_POLLERS = Math.max(1, Runtime.getRuntime().availableProcessors() / 2);
    private static final AtomicInteger POLLERS = new AtomicInteger();

    /** The connection's transport, or null when polling is off. */
    private final Transport transport;
    private final long limitNanos;
    private long meanGap;
    private int waits, misses, skip;
    private boolean afterLargePayload;

    /** {@code limitNanos}: the longest poll, 0 disables; so does a transport that cannot receive without waiting. */
    BusyPoll(Transport transport, long limitNanos) {
        this.transport = limitNanos > 0 && transport.canWaitForArrival() ? transport : null;
        this.limitNanos = limitNanos;
        this.meanGap = limitNanos / 4; // start by trying: a fresh connection is often a latency-bound one
    }

    /**
     * Polls for bytes into {@code in}; returns what {@link Transport#receiveNow} returned: bytes received, -1
     * at end of stream, or 0 when the caller should wait in an ordinary receive.
     */
    int poll(ByteBuffer in) throws IOException {
        if (transport == null || afterLargePayload) return 0;
        boolean probe = ++waits % PROBE_EVERY == 0;
        if (!probe) {
            if (skip > 0) {
                skip--;
                return 0;
            }
            if (meanGap < MIN_GAP_NANOS) return 0;
        }
        if (Transports.othersWaitingToRun()) return 0;
        if (POLLERS.incrementAndGet() > MAX_POLLERS) {
            POLLERS.decrementAndGet();
            return 0;
        }
        long start = 0, now = 0;
        try {
            int n = transport.receiveNow(in);
            if (n != 0) {
                learn(0); // already there: the caller's read would not have slept either
                return n;
            }
            start = now = System.nanoTime();
            do {
                Thread.onSpinWait();
                n = transport.receiveNow(in);
                if (n != 0) {
                    learn(System.nanoTime() - start);
                    misses = 0;
                    return n;
                }
                now = System.nanoTime();
                if (Transports.othersWaitingToRun()) return 0; // give the carrier up; neither a hit nor a miss
            } while (now - start < limitNanos);
        } finally {
            POLLERS.decrementAndGet();
        }
        learn(now - start);
        misses = Math.min(misses + 1, 8);
        skip = (1 << misses) - 1;
        return 0;
    }

    /** Whether the request just received carried a large write payload (see above); if so the next wait is not polled. */
    void afterLargePayload(boolean large) {
        afterLargePayload = large;
    }

    private void learn(long gap) {
        meanGap += (gap - meanGap) / 8;
    }
}
