package io.jnbd.client;

import java.util.concurrent.TimeUnit;

/** Helpers shared by the client's tests. */
final class Tests {

    private Tests() {
    }

    /**
     * Waits (at most 10 s, to catch a hang) until {@code t} has finished or is parked: whichever it does,
     * whatever it was going to do before it would wait has happened.
     */
    static void awaitParkedOrDone(Thread t) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (System.nanoTime() < until) {
            switch (t.getState()) {
                case TERMINATED, WAITING, TIMED_WAITING -> { return; }
                default -> Thread.sleep(1);
            }
        }
        throw new AssertionError(t.getName() + " neither finished nor waited within 10 s: " + t.getState());
    }
}
