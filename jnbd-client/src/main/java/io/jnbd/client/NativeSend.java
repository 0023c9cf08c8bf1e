package io.jnbd.client;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;

/**
 * Writes to a blocking socket from a virtual thread without the JDK's socket write. The JDK, the first time a
 * virtual thread writes to a socket channel, puts the socket in non-blocking mode for good, after which every
 * blocking read of the connection's reader thread costs a failed read and a poll. So a virtual thread's
 * requests used to be handed to the sender thread: a wake-up and a write there for every batch, which is what a
 * server's connection (a virtual thread) forwarding to this client paid per request (the pool's serving
 * process, issue 35). {@code sendmsg} with MSG_DONTWAIT leaves the socket's mode alone.
 *
 * <p>One per connection, used under its sender's lock (its scratch memory is not shared). Loaded only when a
 * virtual thread writes, so that a library user who never does is never warned about native access.
 */
final class NativeSend {
    private static final StructLayout CAPTURE = Splice.CAPTURE;
    private static final VarHandle ERRNO = Splice.ERRNO;

    private static final int MSG_DONTWAIT = 0x40;
    private static final int MSG_NOSIGNAL = 0x4000;
    private static final short POLLOUT = 4;
    private static final int EINTR = 4;
    private static final int EAGAIN = 11;
    /** struct msghdr on 64-bit Linux: name, namelen, iov, iovlen, control, controllen, flags. */
    private static final long MSGHDR_SIZE = 56;
    private static final long MSG_IOV = 16;
    private static final long MSG_IOVLEN = 24;
    /** IOV_MAX; more buffers go in the next call. */
    private static final int MAX_IOV = 1024;
    /** Heap buffers are copied here (requests' payloads written inline are at most Sender.INLINE_MAX_PAYLOAD). */
    private static final int COPY_SPACE = 128 * 1024;

    /**
     * Splice's test stands for this one too (the socket's descriptor comes the same way, and native access is
     * the same); the two functions are linked on first use, each by a holder class, as Splice's are.
     */
    static final boolean AVAILABLE = Splice.AVAILABLE && Libc.LOOKUP.find("sendmsg").isPresent()
        && Libc.LOOKUP.find("poll").isPresent();

    private static final class Sendmsg {
        static final MethodHandle H = Libc.withErrno("sendmsg",
            FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT));
    }

    /** Only when the socket's buffer is full. */
    private static final class Poll {
        static final MethodHandle H = Libc.withErrno("poll",
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT));
    }

    private final int fd;
    private final MemorySegment msg;
    private final MemorySegment iov;
    private final MemorySegment state;
    private final MemorySegment pollFd;
    private final MemorySegment copies;

    private NativeSend(int fd) {
        this.fd = fd;
        Arena arena = Arena.ofAuto();
        this.msg = arena.allocate(MSGHDR_SIZE, 8);
        this.iov = arena.allocate(16L * MAX_IOV, 8);
        this.state = arena.allocate(CAPTURE);
        this.pollFd = arena.allocate(8, 4);
        this.copies = arena.allocate(COPY_SPACE, 16);
    }

    /** A writer for {@code socket}, or null where native calls or its descriptor are not to be had. */
    static NativeSend of(java.nio.channels.SocketChannel socket) {
        if (!AVAILABLE) return null;
        int fd = Splice.fd(socket);
        return fd < 0 ? null : new NativeSend(fd);
    }

    /**
     * Writes every remaining byte of {@code bufs}, in order. Callers send only what fits the socket's buffer
     * (Sender's inline budget), so the socket taking less and the poll for room (which holds the carrier
     * thread) are rare.
     */
    void writeFully(ByteBuffer... bufs) throws IOException {
        int first = 0;
        while (first < bufs.length) {
            if (!bufs[first].hasRemaining()) {
                first++;
                continue;
            }
            if (sendOnce(bufs, first) == 0) awaitRoom();
        }
    }

    private long sendOnce(ByteBuffer[] bufs, int first) throws IOException {
        int n = 0;
        long copied = 0;
        Arena extra = null;
        try {
            for (int b = first; b < bufs.length && n < MAX_IOV; b++) {
                ByteBuffer buf = bufs[b];
                if (!buf.hasRemaining()) continue;
                MemorySegment seg;
                if (buf.isDirect()) {
                    seg = MemorySegment.ofBuffer(buf);
                } else if (copied + buf.remaining() <= COPY_SPACE) {
                    seg = copies.asSlice(copied, buf.remaining()).copyFrom(MemorySegment.ofBuffer(buf));
                    copied += buf.remaining();
                } else {
                    if (extra == null) extra = Arena.ofConfined();
                    seg = extra.allocate(buf.remaining()).copyFrom(MemorySegment.ofBuffer(buf));
                }
                iov.setAtIndex(ValueLayout.ADDRESS, 2L * n, seg);
                iov.setAtIndex(ValueLayout.JAVA_LONG, 2L * n + 1, seg.byteSize());
                n++;
            }
            msg.set(ValueLayout.ADDRESS, MSG_IOV, iov);
            msg.set(ValueLayout.JAVA_LONG, MSG_IOVLEN, n);
            long sent;
            while (true) {
                sent = (long) Sendmsg.H.invokeExact(state, fd, msg, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (sent >= 0) break;
                int errno = (int) ERRNO.get(state, 0L);
                if (errno == EINTR) continue;
                if (errno == EAGAIN) return 0;
                throw Splice.error("sendmsg", errno);
            }
            long left = sent;
            for (int b = first; b < bufs.length && left > 0; b++) {
                int step = (int) Math.min(left, bufs[b].remaining());
                bufs[b].position(bufs[b].position() + step);
                left -= step;
            }
            return sent;
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("sendmsg: " + t, t);
        } finally {
            if (extra != null) extra.close();
        }
    }

    private void awaitRoom() throws IOException {
        pollFd.set(ValueLayout.JAVA_INT, 0, fd);
        pollFd.set(ValueLayout.JAVA_SHORT, 4, POLLOUT);
        pollFd.set(ValueLayout.JAVA_SHORT, 6, (short) 0);
        try {
            int r = (int) Poll.H.invokeExact(state, pollFd, 1L, 1000);
            if (r < 0 && (int) ERRNO.get(state, 0L) != EINTR) throw Splice.error("poll", (int) ERRNO.get(state, 0L));
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("poll: " + t, t);
        }
    }
}
