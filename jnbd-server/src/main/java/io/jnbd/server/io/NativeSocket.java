package io.jnbd.server.io;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.ByteBuffer;

/**
 * The socket calls the JDK lacks, through {@code java.lang.foreign}: sends and receives that never wait
 * (MSG_DONTWAIT), a Unix peer's credentials as numbers (SO_PEERCRED), sendfile behind a MSG_MORE header, the receive low-water mark, FIONREAD, poll and epoll.
 * Every call here returns instead of waiting on a socket; waiting is the caller's business (see
 * {@code io.jnbd.server.net.Poller}), so these calls are safe on virtual threads. Callers check
 * {@link #AVAILABLE} and keep to the JDK's channels when it is false (another OS, an architecture
 * {@link LinuxAbi} has no constants for, or a JVM started without native access).
 */
public final class NativeSocket {
    private NativeSocket() {}

    public static final int EPOLLIN = 0x001;
    public static final int EPOLLOUT = 0x004;
    private static final int EPOLLERR = 0x008;
    private static final int EPOLLHUP = 0x010;
    private static final int EPOLLRDHUP = 0x2000;
    private static final int EPOLLONESHOT = 1 << 30;
    private static final int EPOLL_CTL_ADD = 1;
    private static final int EPOLL_CTL_MOD = 3;
    /** The architecture's constants (see {@link LinuxAbi}); null keeps every call here off. */
    private static final LinuxAbi ABI = LinuxAbi.CURRENT;
    private static final int EPOLL_CLOEXEC = ABI == null ? 0 : ABI.oCloexec();
    private static final int ENOENT = 2;
    private static final int EEXIST = 17;
    private static final boolean PACKED_EPOLL_EVENT = ABI != null && ABI.packedEpollEvent();
    public static final int EPOLL_EVENT_SIZE = PACKED_EPOLL_EVENT ? 12 : 16;
    private static final int EPOLL_DATA_OFFSET = PACKED_EPOLL_EVENT ? 4 : 8;

    private static final short POLLIN = 0x1;
    private static final short POLLOUT = 0x4;
    private static final int SOL_SOCKET = ABI == null ? 0 : ABI.solSocket();
    private static final int SO_RCVLOWAT = ABI == null ? 0 : ABI.soRcvlowat();
    private static final int SO_PEERCRED = ABI == null ? 0 : ABI.soPeercred();
    // The TCP level's numbers come from the generic linux/tcp.h and are the same on every architecture.
    private static final int IPPROTO_TCP = 6;
    private static final int TCP_NOTSENT_LOWAT = 25;
    private static final int MSG_DONTWAIT = 0x40;
    private static final int MSG_MORE = 0x8000;
    private static final int MSG_NOSIGNAL = 0x4000;
    private static final long FIONREAD = ABI == null ? 0 : ABI.fionread();

    /** struct msghdr on LP64 Linux. */
    private static final StructLayout MSGHDR = MemoryLayout.structLayout(
        ValueLayout.ADDRESS.withName("name"), ValueLayout.JAVA_INT.withName("namelen"), MemoryLayout.paddingLayout(4),
        ValueLayout.ADDRESS.withName("iov"), ValueLayout.JAVA_LONG.withName("iovlen"),
        ValueLayout.ADDRESS.withName("control"), ValueLayout.JAVA_LONG.withName("controllen"),
        ValueLayout.JAVA_INT.withName("flags"), MemoryLayout.paddingLayout(4));
    private static final long MSG_IOV = MSGHDR.byteOffset(MemoryLayout.PathElement.groupElement("iov"));
    private static final long MSG_IOVLEN = MSGHDR.byteOffset(MemoryLayout.PathElement.groupElement("iovlen"));
    private static final int MAX_IOV = 64;
    /** Room for the heap buffers of one send (reply headers, error messages) copied to native memory. */
    private static final int COPY_SPACE = 8192;

    /**
     * Per-thread scratch: errno capture, 64 bytes for small values and headers, the sendfile offset, an iovec
     * array and a msghdr. A connection's reader and writer are long-lived threads, so this is made once each.
     */
    private static final class Scratch {
        final MemorySegment state, small, offset, iov, msg, copies;
        final int slot;

        Scratch(Arena arena, int slot) {
            this.slot = slot;
            state = arena.allocate(Libc.CAPTURE_LAYOUT);
            copies = arena.allocate(COPY_SPACE);
            small = arena.allocate(64);
            offset = arena.allocate(ValueLayout.JAVA_LONG);
            iov = arena.allocate(Libc.IOVEC, MAX_IOV);
            msg = arena.allocate(MSGHDR);
        }
    }

    /**
     * Scratch areas, in slots taken with one compare-and-set. Not a ThreadLocal: with a virtual thread per
     * connection that would be one area per connection; a native call never yields, so the areas in use at
     * once are as many as the carriers and platform threads calling. A caller that finds no free slot (more
     * threads than slots) gets an area of its own for the call.
     */
    private static final int SLOTS = 64;
    private static final Scratch[] SLOT = new Scratch[SLOTS];
    private static final java.util.concurrent.atomic.AtomicIntegerArray BUSY = new java.util.concurrent.atomic.AtomicIntegerArray(SLOTS);

    private static Scratch take() {
        int start = (int) Thread.currentThread().threadId();
        for (int i = 0; i < SLOTS; i++) {
            int slot = (start + i) & (SLOTS - 1);
            if (BUSY.compareAndSet(slot, 0, 1)) {
                Scratch s = SLOT[slot];
                if (s == null) SLOT[slot] = s = new Scratch(Arena.ofAuto(), slot);
                return s;
            }
        }
        return new Scratch(Arena.ofAuto(), -1);
    }

    private static void give(Scratch s) {
        if (s.slot >= 0) BUSY.set(s.slot, 0);
    }

    /**
     * Each function is linked on first use by a holder class of its own (see {@link SocketCalls}); whether
     * they can be linked at all is settled here: every symbol present and native access granted (geteuid
     * linked as the probe).
     */
    public static final boolean AVAILABLE = ABI != null && linkable();

    private static boolean linkable() {
        try {
            return Libc.allFound("send", "sendfile", "sendmsg", "recv", "setsockopt", "getsockopt", "geteuid", "poll",
                "ioctl", "epoll_create1", "epoll_ctl", "epoll_wait") && SocketCalls.Geteuid.H != null;
        } catch (LinkageError | RuntimeException e) {
            return false; // no linker here, or no native access: callers keep to the JDK's channels
        }
    }

    /**
     * The descriptor behind a JDK socket channel, or -1. Needs {@code --add-exports java.base/sun.nio.ch=ALL-UNNAMED};
     * without it the caller keeps to the JDK's own calls.
     */
    public static int fd(java.nio.channels.SocketChannel channel) {
        return fdOf(channel);
    }

    /** The descriptor behind a JDK server socket channel, or -1; as {@link #fd(java.nio.channels.SocketChannel)}. */
    public static int fd(java.nio.channels.ServerSocketChannel channel) {
        return fdOf(channel);
    }

    private static int fdOf(java.nio.channels.Channel channel) {
        if (FD_VAL == null) return -1;
        try {
            return (int) FD_VAL.invoke(channel);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return -1; // not the JDK's channel class
        }
    }

    /** SelChImpl.getFDVal, looked up once (every accepted connection asks), or null when not exported to us. */
    private static final java.lang.reflect.Method FD_VAL = fdVal();

    private static java.lang.reflect.Method fdVal() {
        try {
            return AVAILABLE ? Class.forName("sun.nio.ch.SelChImpl").getMethod("getFDVal") : null;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    /**
     * Sends as much of {@code bufs} as the socket takes without waiting (sendmsg with MSG_DONTWAIT) and
     * advances the buffers' positions; returns the bytes sent, 0 when the socket buffer is full. Heap buffers
     * are copied to native memory first; data buffers are direct and go as they are.
     */
    public static long sendNow(int socketFd, ByteBuffer[] bufs) throws IOException {
        if (bufs.length == 1 && !bufs[0].isDirect() && bufs[0].remaining() > COPY_SPACE && SocketCalls.SendHeap.H != null) {
            return sendHeapNow(socketFd, bufs[0]);
        }
        Scratch s = take();
        Arena copies = null;
        long copied = 0;
        try {
            int n = 0;
            for (ByteBuffer b : bufs) {
                if (!b.hasRemaining()) continue;
                if (n == MAX_IOV) break; // the rest goes in the next call
                MemorySegment seg;
                if (b.isDirect()) {
                    seg = MemorySegment.ofBuffer(b);
                } else if (copied + b.remaining() <= COPY_SPACE) {
                    seg = s.copies.asSlice(copied, b.remaining()).copyFrom(MemorySegment.ofBuffer(b));
                    copied += b.remaining();
                } else {
                    if (copies == null) copies = Arena.ofConfined();
                    seg = copies.allocate(b.remaining()).copyFrom(MemorySegment.ofBuffer(b));
                }
                s.iov.setAtIndex(ValueLayout.ADDRESS, 2L * n, seg);
                s.iov.setAtIndex(ValueLayout.JAVA_LONG, 2L * n + 1, seg.byteSize());
                n++;
            }
            if (n == 0) return 0;
            s.msg.set(ValueLayout.ADDRESS, MSG_IOV, s.iov);
            s.msg.set(ValueLayout.JAVA_LONG, MSG_IOVLEN, n);
            long sent;
            while (true) {
                sent = (long) SocketCalls.Sendmsg.H.invokeExact(s.state, socketFd, s.msg, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (sent >= 0) break;
                int e = errno(s.state);
                if (e == Errno.EINTR) continue;
                if (e == Errno.EAGAIN) return 0;
                throw new NativeIo.ErrnoException("sendmsg", e);
            }
            long left = sent;
            for (ByteBuffer b : bufs) {
                int step = (int) Math.min(left, b.remaining());
                b.position(b.position() + step);
                left -= step;
            }
            return sent;
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("sendmsg", t);
        } finally {
            if (copies != null) copies.close();
            give(s);
        }
    }

    /** One large heap buffer, sent from where it lies (see SendHeap). */
    private static long sendHeapNow(int socketFd, ByteBuffer buf) throws IOException {
        Scratch s = take();
        MemorySegment src = MemorySegment.ofBuffer(buf);
        try {
            while (true) {
                long n = (long) SocketCalls.SendHeap.H.invokeExact(s.state, socketFd, src, src.byteSize(), MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n >= 0) {
                    buf.position(buf.position() + (int) n);
                    return n;
                }
                int e = errno(s.state);
                if (e == Errno.EINTR) continue;
                if (e == Errno.EAGAIN) return 0;
                throw new NativeIo.ErrnoException("send", e);
            }
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("send", t);
        } finally {
            give(s);
        }
    }

    /**
     * Sends what is left of {@code header} with MSG_MORE, then file bytes from {@code position} by sendfile,
     * at most {@code length}, as far as the socket takes them without waiting. MSG_MORE lets the kernel put
     * the header and the first data in one segment. Returns the file bytes sent (the header's progress shows
     * in its position); 0 with the header unfinished or nothing taken means the socket is full.
     */
    public static long sendFileNow(int socketFd, ByteBuffer header, int fileFd, long position, long length) throws IOException {
        Scratch s = take();
        try {
            while (header.hasRemaining()) {
                int len = header.remaining();
                if (len > s.small.byteSize()) throw new IllegalArgumentException("header too long");
                MemorySegment h = s.small.asSlice(0, len).copyFrom(MemorySegment.ofBuffer(header));
                long n = (long) SocketCalls.Send.H.invokeExact(s.state, socketFd, h, (long) len, MSG_MORE | MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                    int e = errno(s.state);
                    if (e == Errno.EINTR) continue;
                    if (e == Errno.EAGAIN) return 0;
                    throw new NativeIo.ErrnoException("send", e);
                }
                header.position(header.position() + (int) n);
            }
            s.offset.set(ValueLayout.JAVA_LONG, 0, position);
            long sent = 0;
            while (sent < length) {
                // The socket is non-blocking: sendfile takes what fits and says EAGAIN when nothing does.
                long n = (long) SocketCalls.Sendfile.H.invokeExact(s.state, socketFd, fileFd, s.offset, length - sent);
                if (n < 0) {
                    int e = errno(s.state);
                    if (e == Errno.EINTR) continue;
                    if (e == Errno.EAGAIN) return sent;
                    throw new NativeIo.ErrnoException("sendfile", e);
                }
                if (n == 0) throw new java.io.EOFException("file ended at " + (position + sent) + " while sending a read");
                sent += n;
            }
            return sent;
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("sendfile", t);
        } finally {
            give(s);
        }
    }

    /**
     * Receives into {@code dst} (position to limit) what the socket holds, without waiting, and advances its
     * position. Returns the bytes received, 0 when nothing is there yet, -1 at end of stream.
     */
    public static int receiveNow(int socketFd, ByteBuffer dst) throws IOException {
        if (!dst.isDirect() && SocketCalls.RecvHeap.H == null) {
            // A small native bounce, then into the heap buffer.
            try (Arena arena = Arena.ofConfined()) {
                ByteBuffer bounce = arena.allocate(Math.max(1, dst.remaining())).asByteBuffer().limit(dst.remaining());
                int n = receiveNow(socketFd, bounce);
                if (n > 0) dst.put(bounce.flip());
                return n;
            }
        }
        Scratch s = take();
        MemorySegment target = MemorySegment.ofBuffer(dst);
        MethodHandle recv = dst.isDirect() ? SocketCalls.Recv.H : SocketCalls.RecvHeap.H;
        try {
            while (true) {
                long n = (long) recv.invokeExact(s.state, socketFd, target, target.byteSize(), MSG_DONTWAIT);
                if (n > 0) {
                    dst.position(dst.position() + (int) n);
                    return (int) n;
                }
                if (n == 0) return target.byteSize() == 0 ? 0 : -1;
                int e = errno(s.state);
                if (e == Errno.EINTR) continue;
                if (e == Errno.EAGAIN) return 0;
                throw new NativeIo.ErrnoException("recv", e);
            }
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("recv", t);
        } finally {
            give(s);
        }
    }

    /**
     * Sets the socket's receive low-water mark (SO_RCVLOWAT): it then polls readable only once that many bytes
     * wait, and the kernel does not wake a waiter for each segment that arrives before.
     */
    public static void setReceiveLowWater(int socketFd, int bytes) throws IOException {
        setIntOption(socketFd, SOL_SOCKET, SO_RCVLOWAT, bytes, "SO_RCVLOWAT");
    }

    /**
     * Limits the bytes a TCP socket holds that it has not yet sent (TCP_NOTSENT_LOWAT): sends stop and the
     * socket polls unwritable above it, so the sender waits instead of queueing what the peer's window cannot
     * take yet. Fails on a socket that is not TCP.
     */
    public static void setUnsentLimit(int socketFd, int bytes) throws IOException {
        setIntOption(socketFd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, bytes, "TCP_NOTSENT_LOWAT");
    }

    private static void setIntOption(int socketFd, int level, int option, int v, String name) throws IOException {
        Scratch s = take();
        MemorySegment value = s.small.asSlice(0, 4);
        value.set(ValueLayout.JAVA_INT, 0, v);
        try {
            int r = (int) SocketCalls.Setsockopt.H.invokeExact(s.state, socketFd, level, option, value, 4);
            if (r < 0) throw new NativeIo.ErrnoException("setsockopt(" + name + ")", errno(s.state));
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("setsockopt", t);
        } finally {
            give(s);
        }
    }

    /**
     * The process at the other end of a Unix-domain socket, as the kernel recorded it when that process connected
     * (or listened): it cannot be forged by what the peer sends. Ids are unsigned, as the kernel has them.
     */
    public record PeerCredentials(long pid, long uid, long gid) {}

    /** {@code getsockopt(SO_PEERCRED)} of a connected Unix-domain socket. */
    public static PeerCredentials peerCredentials(int socketFd) throws IOException {
        Scratch s = take();
        MemorySegment ucred = s.small.asSlice(0, 12); // struct ucred { pid_t pid; uid_t uid; gid_t gid; }, alike on every Linux
        MemorySegment length = s.small.asSlice(16, 4);
        length.set(ValueLayout.JAVA_INT, 0, 12);
        try {
            int r = (int) SocketCalls.Getsockopt.H.invokeExact(s.state, socketFd, SOL_SOCKET, SO_PEERCRED, ucred, length);
            if (r < 0) throw new NativeIo.ErrnoException("getsockopt(SO_PEERCRED)", errno(s.state));
            if (length.get(ValueLayout.JAVA_INT, 0) != 12) throw new IOException("getsockopt(SO_PEERCRED) gave no struct ucred");
            return new PeerCredentials(Integer.toUnsignedLong(ucred.get(ValueLayout.JAVA_INT, 0)),
                Integer.toUnsignedLong(ucred.get(ValueLayout.JAVA_INT, 4)), Integer.toUnsignedLong(ucred.get(ValueLayout.JAVA_INT, 8)));
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("getsockopt", t);
        } finally {
            give(s);
        }
    }

    /** This process's effective user id, which the kernel checks files and sockets against. */
    public static long effectiveUid() {
        try {
            return Integer.toUnsignedLong((int) SocketCalls.Geteuid.H.invokeExact());
        } catch (Throwable t) {
            throw new IllegalStateException("geteuid", t);
        }
    }

    /**
     * Waits, blocking this thread, until the socket is readable ({@code write} false: its low-water mark of
     * bytes is there, or it is shut down or failed) or writable, or {@code timeoutMillis} pass (-1: no limit).
     * Returns false on timeout. Blocks the carrier of a virtual thread: virtual threads wait through the
     * poller instead.
     */
    public static boolean poll(int socketFd, boolean write, int timeoutMillis) throws IOException {
        Scratch s = take();
        MemorySegment pollfd = s.small.asSlice(0, 8); // struct pollfd { int fd; short events, revents; }
        pollfd.set(ValueLayout.JAVA_INT, 0, socketFd);
        pollfd.set(ValueLayout.JAVA_SHORT, 4, write ? POLLOUT : POLLIN);
        pollfd.set(ValueLayout.JAVA_SHORT, 6, (short) 0);
        try {
            int r = (int) SocketCalls.Poll.H.invokeExact(s.state, pollfd, 1L, timeoutMillis);
            if (r < 0) {
                int e = errno(s.state);
                if (e == Errno.EINTR) return true; // the caller's next call finds out what there is
                throw new NativeIo.ErrnoException("poll", e);
            }
            return r > 0;
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("poll", t);
        } finally {
            give(s);
        }
    }

    /** How many received bytes wait in the socket to be read (ioctl FIONREAD). */
    public static int bytesQueued(int socketFd) throws IOException {
        Scratch s = take();
        MemorySegment value = s.small.asSlice(0, 4);
        try {
            int r = (int) SocketCalls.Ioctl.H.invokeExact(s.state, socketFd, FIONREAD, value);
            if (r < 0) throw new NativeIo.ErrnoException("ioctl(FIONREAD)", errno(s.state));
            return value.get(ValueLayout.JAVA_INT, 0);
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("ioctl", t);
        } finally {
            give(s);
        }
    }

    /** A new epoll instance. */
    public static int epollCreate() throws IOException {
        Scratch s = take();
        try {
            int fd = (int) SocketCalls.EpollCreate1.H.invokeExact(s.state, EPOLL_CLOEXEC);
            if (fd < 0) throw new NativeIo.ErrnoException("epoll_create1", errno(s.state));
            return fd;
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("epoll_create1", t);
        } finally {
            give(s);
        }
    }

    /**
     * Arms {@code fd} in {@code epfd} for one report of {@code events} (EPOLLIN or EPOLLOUT; hang-ups and errors
     * are always reported), adding it on first use. The kernel checks readiness as it arms, so an event that
     * is already there is reported at once.
     */
    public static void epollArmOnce(int epfd, int fd, int events) throws IOException {
        Scratch s = take();
        MemorySegment ev = s.small.asSlice(0, EPOLL_EVENT_SIZE);
        ev.set(ValueLayout.JAVA_INT_UNALIGNED, 0, events | EPOLLONESHOT | EPOLLRDHUP | EPOLLERR | EPOLLHUP);
        ev.set(ValueLayout.JAVA_LONG_UNALIGNED, EPOLL_DATA_OFFSET, fd);
        try {
            int r = (int) SocketCalls.EpollCtl.H.invokeExact(s.state, epfd, EPOLL_CTL_MOD, fd, ev);
            if (r == 0) return;
            int e = errno(s.state);
            if (e != ENOENT) throw new NativeIo.ErrnoException("epoll_ctl", e);
            r = (int) SocketCalls.EpollCtl.H.invokeExact(s.state, epfd, EPOLL_CTL_ADD, fd, ev);
            if (r == 0) return;
            e = errno(s.state);
            if (e == EEXIST) { // armed by a racing call meanwhile
                r = (int) SocketCalls.EpollCtl.H.invokeExact(s.state, epfd, EPOLL_CTL_MOD, fd, ev);
                if (r == 0) return;
                e = errno(s.state);
            }
            throw new NativeIo.ErrnoException("epoll_ctl", e);
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("epoll_ctl", t);
        } finally {
            give(s);
        }
    }

    /**
     * Waits for events on {@code epfd} into {@code events} (room for {@code max} entries of
     * {@link #EPOLL_EVENT_SIZE}); returns how many, 0 on a signal.
     */
    public static int epollWait(int epfd, MemorySegment events, int max) throws IOException {
        Scratch s = take();
        try {
            int n = (int) SocketCalls.EpollWait.H.invokeExact(s.state, epfd, events, max, -1);
            if (n >= 0) return n;
            int e = errno(s.state);
            if (e == Errno.EINTR) return 0;
            throw new NativeIo.ErrnoException("epoll_wait", e);
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("epoll_wait", t);
        } finally {
            give(s);
        }
    }

    /** The descriptor of the {@code index}th event that {@link #epollWait} reported. */
    public static int epollEventFd(MemorySegment events, int index) {
        return (int) events.get(ValueLayout.JAVA_LONG_UNALIGNED, (long) index * EPOLL_EVENT_SIZE + EPOLL_DATA_OFFSET);
    }

    private static int errno(MemorySegment state) {
        return Libc.errno(state);
    }
}
