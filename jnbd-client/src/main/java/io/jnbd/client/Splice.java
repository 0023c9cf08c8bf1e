package io.jnbd.client;

import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.nio.channels.SocketChannel;

/**
 * Moves bytes from one socket to another inside the kernel: {@code splice(2)} from the source socket into a
 * pipe, then from the pipe into the destination socket. Received pages are passed along by reference, so a
 * copy between two servers costs neither the copy out of the kernel into a buffer nor the copy back in.
 *
 * <p>Needs native access and {@code --add-exports java.base/sun.nio.ch=ALL-UNNAMED} (for the sockets'
 * descriptors), both of which {@code bin/jnbd} gives; without them {@link #AVAILABLE} is false and callers
 * keep to buffers. Loaded only when a caller asks, so that a library user who never splices is never warned
 * about native access.
 */
final class Splice implements AutoCloseable {

    /** The errno a downcall captures; NativeSend uses them too. */
    static final StructLayout CAPTURE = Linker.Option.captureStateLayout();
    static final VarHandle ERRNO = CAPTURE.varHandle(MemoryLayout.PathElement.groupElement("errno"));

    private static final int SPLICE_F_MOVE = 1;
    private static final int SPLICE_F_MORE = 4;
    private static final int O_CLOEXEC = 0x80000;
    private static final int F_SETPIPE_SZ = 1031;
    private static final int EINTR = 4;
    /** The most a pipe may hold without privileges on a default system (/proc/sys/fs/pipe-max-size). */
    private static final int PIPE_SIZE = 1 << 20;

    private static final ValueLayout.OfInt I = ValueLayout.JAVA_INT;
    private static final ValueLayout.OfLong L = ValueLayout.JAVA_LONG;
    private static final java.lang.reflect.Method FD_VAL = fdVal();
    /**
     * Whether splicing can work here: the sockets' descriptors to hand, the calls in the C library and native
     * access granted (close, the cheapest, linked to find out). Each function is linked by a holder class of
     * its own on first use (once, under the JVM's class initialisation lock): a linked function costs a
     * generated stub, 5-10 ms at start-up, which a process that never splices, or a library user who never
     * asks, should not pay.
     */
    static final boolean AVAILABLE = FD_VAL != null && linkable();

    private static java.lang.reflect.Method fdVal() {
        try {
            return Class.forName("sun.nio.ch.SelChImpl").getMethod("getFDVal");
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null; // sun.nio.ch not exported to us: buffers it is
        }
    }

    private static boolean linkable() {
        try {
            SymbolLookup libc = Libc.LOOKUP;
            return libc.find("splice").isPresent() && libc.find("pipe2").isPresent() && libc.find("fcntl").isPresent()
                && Close.H != null;
        } catch (LinkageError | RuntimeException e) {
            return false; // no linker here, or no native access (--illegal-native-access=deny)
        }
    }

    private static final class SpliceCall {
        static final MethodHandle H = Libc.withErrno("splice", FunctionDescriptor.of(L, I, ValueLayout.ADDRESS, I, ValueLayout.ADDRESS, L, I));
    }

    private static final class Pipe2 {
        static final MethodHandle H = Libc.withErrno("pipe2", FunctionDescriptor.of(I, ValueLayout.ADDRESS, I));
    }

    private static final class Fcntl {
        static final MethodHandle H = Libc.link("fcntl", FunctionDescriptor.of(I, I, I, I), Linker.Option.firstVariadicArg(2));
    }

    private static final class Close {
        static final MethodHandle H = Libc.link("close", FunctionDescriptor.of(I, I));
    }

    private final int readEnd;
    private final int writeEnd;
    private final int capacity;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment state = arena.allocate(CAPTURE);

    private Splice(int readEnd, int writeEnd, int capacity) {
        this.readEnd = readEnd;
        this.writeEnd = writeEnd;
        this.capacity = capacity;
    }

    /** A pipe to splice through, as large as the system allows an unprivileged process. */
    static Splice open() throws IOException {
        if (!AVAILABLE) throw new IOException("splice is not available (no native access)");
        try (Arena a = Arena.ofConfined()) {
            MemorySegment fds = a.allocate(ValueLayout.JAVA_INT, 2);
            MemorySegment st = a.allocate(CAPTURE);
            if ((int) Pipe2.H.invokeExact(st, fds, O_CLOEXEC) != 0) throw error("pipe2", (int) ERRNO.get(st, 0L));
            int r = fds.getAtIndex(ValueLayout.JAVA_INT, 0);
            int w = fds.getAtIndex(ValueLayout.JAVA_INT, 1);
            int size = (int) Fcntl.H.invokeExact(w, F_SETPIPE_SZ, PIPE_SIZE);
            return new Splice(r, w, size > 0 ? size : 64 * 1024);
        } catch (IOException e) {
            throw e;
        } catch (Throwable e) {
            throw new IOException("pipe2: " + e, e);
        }
    }

    /** The descriptor behind a JDK socket channel, or -1. */
    static int fd(SocketChannel channel) {
        if (FD_VAL == null) return -1;
        try {
            return (int) FD_VAL.invoke(channel);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return -1;
        }
    }

    /** How far a {@link #transfer} got: bytes taken from the source, and how many of those reached the destination. */
    static final class Progress {
        long taken;
        long passed;
        /** Whether the source, not the destination, ended the transfer. */
        boolean sourceFailed;
    }

    /**
     * Moves exactly {@code length} bytes from socket {@code from} to socket {@code to}, both in blocking mode.
     * Fails if the source ends first or either side fails; {@code progress} then says which side and how far it
     * got, so that the caller can keep the other stream in step. Every piece but the last is marked
     * SPLICE_F_MORE, so that the kernel does not push a short segment between them.
     */
    void transfer(int from, int to, long length, Progress progress) throws IOException {
        while (progress.taken < length) {
            long in;
            try {
                in = call(from, writeEnd, Math.min(length - progress.taken, capacity), SPLICE_F_MOVE | SPLICE_F_MORE, "splice from the source");
                if (in == 0) throw new EOFException("the source closed the connection with " + (length - progress.taken) + " bytes of a reply still to come");
            } catch (IOException e) {
                progress.sourceFailed = true;
                throw e;
            }
            progress.taken += in;
            passPiped(to, progress, progress.taken < length);
        }
    }

    /**
     * After the source failed: passes what the pipe still holds on to {@code to}, so that the destination has
     * every byte taken from the source before the caller fills in the rest.
     */
    void passRest(int to, Progress progress) throws IOException {
        passPiped(to, progress, true);
    }

    private void passPiped(int to, Progress progress, boolean more) throws IOException {
        while (progress.passed < progress.taken) {
            progress.passed += call(readEnd, to, progress.taken - progress.passed, SPLICE_F_MOVE | (more ? SPLICE_F_MORE : 0),
                "splice to the destination");
        }
    }

    private long call(int in, int out, long n, int flags, String what) throws IOException {
        while (true) {
            long r;
            try {
                r = (long) SpliceCall.H.invokeExact(state, in, MemorySegment.NULL, out, MemorySegment.NULL, n, flags);
            } catch (Throwable e) {
                throw new IOException(what + ": " + e, e);
            }
            if (r >= 0) return r;
            int errno = (int) ERRNO.get(state, 0L);
            if (errno != EINTR) throw error(what, errno);
        }
    }

    static IOException error(String what, int errno) {
        String name = switch (errno) {
            case 9 -> "EBADF (the connection was closed)";
            case 11 -> "EAGAIN (the socket is in non-blocking mode)";
            case 22 -> "EINVAL";
            case 32 -> "EPIPE (the peer closed the connection)";
            case 104 -> "ECONNRESET (connection reset by peer)";
            default -> "errno " + errno;
        };
        return new IOException(what + " failed: " + name);
    }

    @Override
    public void close() {
        try {
            // invokeExact needs the int result taken; close(2) of a pipe end has nothing useful to report.
            int unusedRead = (int) Close.H.invokeExact(readEnd);
            int unusedWrite = (int) Close.H.invokeExact(writeEnd);
        } catch (Throwable ignored) {
            // Closing a pipe cannot usefully fail.
        }
        arena.close();
    }
}
