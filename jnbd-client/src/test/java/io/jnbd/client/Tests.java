package io.jnbd.client;

import io.jnbd.server.io.NativeSocket;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
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

    /** O_NONBLOCK in a file's status flags. */
    static final int O_NONBLOCK = 04000;

    /** The open file description's flags of {@code ch}'s socket, as /proc/self/fdinfo shows them (octal). */
    static int fileStatusFlags(SocketChannel ch) throws Exception {
        int fd = NativeSocket.fd(ch);
        if (fd < 0) throw new AssertionError("no descriptor for " + ch);
        for (String line : Files.readAllLines(Path.of("/proc/self/fdinfo/" + fd))) {
            if (line.startsWith("flags:")) return Integer.parseInt(line.substring(6).strip(), 8);
        }
        throw new AssertionError("no flags line for fd " + fd);
    }
}
