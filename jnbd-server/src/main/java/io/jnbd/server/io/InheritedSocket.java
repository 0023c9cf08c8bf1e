package io.jnbd.server.io;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.charset.StandardCharsets;

/**
 * The calls that turn a listening socket this process inherited (systemd's socket activation passes them from
 * descriptor 3 up) into one the JDK serves: what kind of socket a descriptor is, its address, and moving it onto
 * another descriptor. {@code io.jnbd.server.net.SocketActivation} says why the move.
 *
 * <p>SO_TYPE, SO_ACCEPTCONN and SO_DOMAIN are asm-generic's numbers, those of both {@link LinuxAbi} rows (the
 * architectures where SOL_SOCKET differs number them otherwise, and the table refuses those). Touch this class
 * only where {@link NativeSocket#AVAILABLE}: its handles are made when it loads.
 */
public final class InheritedSocket {
    private InheritedSocket() {}

    public static final int AF_UNIX = 1;
    public static final int AF_INET = 2;
    public static final int AF_INET6 = 10;
    private static final int SOCK_STREAM = 1;
    private static final int SO_TYPE = 3;
    private static final int SO_ACCEPTCONN = 30;
    private static final int SO_DOMAIN = 39;
    private static final int SOCKADDR_STORAGE = 128;

    private static final MethodHandle GETSOCKOPT = Libc.withErrno("getsockopt", FunctionDescriptor.of(ValueLayout.JAVA_INT,
        ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS));
    private static final MethodHandle GETSOCKNAME = Libc.withErrno("getsockname", FunctionDescriptor.of(ValueLayout.JAVA_INT,
        ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS));
    private static final MethodHandle DUP3 = Libc.withErrno("dup3", FunctionDescriptor.of(ValueLayout.JAVA_INT,
        ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
    private static final MethodHandle CLOSE = Libc.plain("close", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
    private static final MethodHandle UNSETENV = Libc.plain("unsetenv", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS));

    /** The address family (AF_UNIX, AF_INET, AF_INET6) of a stream socket that listens; else an IOException saying what it is. */
    public static int listeningStreamFamily(int fd) throws IOException {
        if (option(fd, SO_TYPE) != SOCK_STREAM) throw new IOException("descriptor " + fd + " is not a stream socket");
        if (option(fd, SO_ACCEPTCONN) != 1) throw new IOException("descriptor " + fd + " is a socket that does not listen");
        return option(fd, SO_DOMAIN);
    }

    /** The address the socket is bound to: an {@link InetSocketAddress} or a {@link UnixDomainSocketAddress}. */
    public static SocketAddress localAddress(int fd) throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Libc.CAPTURE_LAYOUT);
            MemorySegment addr = arena.allocate(SOCKADDR_STORAGE);
            MemorySegment length = arena.allocate(ValueLayout.JAVA_INT);
            length.set(ValueLayout.JAVA_INT, 0, SOCKADDR_STORAGE);
            int r = (int) GETSOCKNAME.invokeExact(state, fd, addr, length);
            if (r < 0) throw new NativeIo.ErrnoException("getsockname", Libc.errno(state));
            return decode(addr, length.get(ValueLayout.JAVA_INT, 0));
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("getsockname", t);
        }
    }

    /** sockaddr_in, sockaddr_in6 or sockaddr_un as Java sees them; the port is in network order. */
    private static SocketAddress decode(MemorySegment addr, int length) throws IOException {
        int family = Short.toUnsignedInt(addr.get(ValueLayout.JAVA_SHORT, 0));
        int port = Short.toUnsignedInt(addr.get(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(java.nio.ByteOrder.BIG_ENDIAN), 2));
        return switch (family) {
            case AF_INET -> new InetSocketAddress(InetAddress.getByAddress(addr.asSlice(4, 4).toArray(ValueLayout.JAVA_BYTE)), port);
            case AF_INET6 -> new InetSocketAddress(InetAddress.getByAddress(addr.asSlice(8, 16).toArray(ValueLayout.JAVA_BYTE)), port);
            case AF_UNIX -> {
                byte[] path = addr.asSlice(2, Math.max(0, length - 2)).toArray(ValueLayout.JAVA_BYTE);
                if (path.length == 0 || path[0] == 0) throw new IOException("an unnamed or abstract Unix socket (jnbd serves path sockets only)");
                int end = 0;
                while (end < path.length && path[end] != 0) end++;
                yield UnixDomainSocketAddress.of(new String(path, 0, end, StandardCharsets.UTF_8));
            }
            default -> throw new IOException("a socket of address family " + family);
        };
    }

    /**
     * Makes {@code target} refer to {@code source}'s socket (closing what {@code target} referred to, as one step)
     * and closes {@code source}: dup3 with O_CLOEXEC, so that no program this process starts inherits it.
     */
    public static void moveOnto(int source, int target) throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Libc.CAPTURE_LAYOUT);
            int r = (int) DUP3.invokeExact(state, source, target, LinuxAbi.CURRENT.oCloexec());
            if (r < 0) throw new NativeIo.ErrnoException("dup3", Libc.errno(state));
            int ignored = (int) CLOSE.invokeExact(source);
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("dup3", t);
        }
    }

    /**
     * Removes {@code name} from the C environment, as sd_listen_fds does with LISTEN_*. (The JDK's own copy, which
     * System.getenv and the programs it starts see, was taken at start; LISTEN_PID keeps those from taking it
     * for theirs.)
     */
    public static void unsetenv(String name) {
        try (Arena arena = Arena.ofConfined()) {
            int ignored = (int) UNSETENV.invokeExact(arena.allocateFrom(name));
        } catch (Throwable t) {
            // nothing depends on it
        }
    }

    private static int option(int fd, int name) throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Libc.CAPTURE_LAYOUT);
            MemorySegment value = arena.allocate(ValueLayout.JAVA_INT);
            MemorySegment length = arena.allocate(ValueLayout.JAVA_INT);
            length.set(ValueLayout.JAVA_INT, 0, 4);
            int r = (int) GETSOCKOPT.invokeExact(state, fd, LinuxAbi.CURRENT.solSocket(), name, value, length);
            if (r < 0) {
                int errno = Libc.errno(state);
                if (errno == 88 /* ENOTSOCK */) throw new IOException("descriptor " + fd + " is not a socket");
                if (errno == 9 /* EBADF */) throw new IOException("descriptor " + fd + " is not open");
                throw new NativeIo.ErrnoException("getsockopt", errno);
            }
            return value.get(ValueLayout.JAVA_INT, 0);
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("getsockopt", t);
        }
    }
}
