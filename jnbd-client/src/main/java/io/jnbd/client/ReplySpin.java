package io.jnbd.client;

import java.io.IOException;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Lets a connection's reader poll its socket for a little while before it sleeps in {@code read}, when a
 * reply is due soon.
 *
 * <p>A caller with one request at a time (a {@link BlockingNbdClient}, a server forwarding one client's request
 * to a memory server) waits for every reply, so every reply finds the reader asleep, and waking it costs more
 * than a server takes to answer a cached 4 KiB read (on a virtual machine an idle CPU must first be woken by an
 * interrupt: 20-40 µs here). libnbd's synchronous calls wait in the caller's own {@code poll} and pay it once;
 * this client paid it twice (the reader, then the caller). Polling with {@code recv(MSG_DONTWAIT)}, which leaves
 * the socket's blocking mode alone, saves the reader's.
 *
 * <p>It polls only while a request is in flight on the connection, for at most {@link #LIMIT_NANOS}; a poll that
 * reaches the limit empty-handed makes the next ones rarer (a slow server costs one wasted poll in up to 256
 * waits), and at most half the CPUs poll at once in the process, so that polling never takes every CPU from
 * the server it waits for when both run on one machine. Plain connections with native access only; a TLS
 * record cannot be read in pieces this way.
 */
final class ReplySpin {
    static final long LIMIT_NANOS = 50_000;
    private static final int MAX_SKIP = 255;
    private static final int MAX_SPINNERS = Math.max(1, Runtime.getRuntime().availableProcessors() / 2);
    private static final AtomicInteger SPINNERS = new AtomicInteger();

    private static final int MSG_DONTWAIT = 0x40;
    private static final int EINTR = 4;
    private static final int EAGAIN = 11;

    /** Linked on first use: a library user whose connections never wait with a request in flight never links it. */
    private static final class Recv {
        static final MethodHandle H = Libc.withErrno("recv", FunctionDescriptor.of(ValueLayout.JAVA_LONG,
            ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT));
    }

    /**
     * Only where native access was granted (bin/jnbd grants it): asking Splice links a function, which would warn
     * a library user who did not grant it, and polling is an optimisation, not worth a warning.
     */
    static final boolean AVAILABLE = ReplySpin.class.getModule().isNativeAccessEnabled() && Splice.AVAILABLE
        && Libc.LOOKUP.find("recv").isPresent();

    /** Requests of the connection still unanswered. */
    private final java.util.function.IntSupplier inFlight;
    private final Transport.Plain transport;
    private final int fd;
    private final MemorySegment state = java.lang.foreign.Arena.ofAuto().allocate(Splice.CAPTURE);
    private int skip, skipNext;

    private ReplySpin(java.util.function.IntSupplier inFlight, Transport.Plain transport, int fd) {
        this.inFlight = inFlight;
        this.transport = transport;
        this.fd = fd;
    }

    /**
     * A poller for the reader of a connection whose unanswered requests {@code inFlight} counts, or null where it
     * cannot poll (TLS, no native access).
     */
    static ReplySpin of(java.util.function.IntSupplier inFlight, Transport transport) {
        if (!AVAILABLE || !(transport instanceof Transport.Plain plain)) return null;
        int fd = Splice.fd(plain.socket);
        return fd < 0 ? null : new ReplySpin(inFlight, plain, fd);
    }

    /**
     * Polls for bytes into {@code in} (a direct buffer, position to limit); returns what {@code read} would:
     * bytes received, -1 at end of stream, or 0 when the caller should wait in an ordinary read.
     */
    int read(ByteBuffer in) throws IOException {
        if (inFlight.getAsInt() == 0) return 0; // nothing is due: sleep
        if (skip > 0) {
            skip--;
            return 0;
        }
        if (SPINNERS.incrementAndGet() > MAX_SPINNERS) {
            SPINNERS.decrementAndGet();
            return 0;
        }
        try {
            long deadline = System.nanoTime() + LIMIT_NANOS;
            do {
                int n = transport.receiveNow(this, in);
                if (n != 0) {
                    skipNext = 0;
                    return n;
                }
                Thread.onSpinWait();
            } while (System.nanoTime() < deadline && inFlight.getAsInt() > 0);
        } finally {
            SPINNERS.decrementAndGet();
        }
        skipNext = Math.min(MAX_SKIP, skipNext * 2 + 1);
        skip = skipNext;
        return 0;
    }

    /** One {@code recv(MSG_DONTWAIT)} into {@code in}; the transport calls it, counted as a native call under way. */
    int recvNow(ByteBuffer in) throws IOException {
        MemorySegment dst = MemorySegment.ofBuffer(in);
        try {
            while (true) {
                long n = (long) Recv.H.invokeExact(state, fd, dst, dst.byteSize(), MSG_DONTWAIT);
                if (n > 0) {
                    in.position(in.position() + (int) n);
                    return (int) n;
                }
                if (n == 0) return -1;
                int errno = (int) Splice.ERRNO.get(state, 0L);
                if (errno == EINTR) continue;
                if (errno == EAGAIN) return 0;
                throw Splice.error("recv", errno);
            }
        } catch (IOException | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("recv: " + t, t);
        }
    }
}
