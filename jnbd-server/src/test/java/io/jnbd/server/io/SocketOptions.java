package io.jnbd.server.io;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.OptionalInt;

/**
 * What a test asks of a socket this JVM holds but cannot reach through Java: the server's side of a connection
 * is found by its ports (/proc/net/tcp), then read with getsockopt(2).
 */
public final class SocketOptions {
    private static final int SO_SNDBUF = 7;
    private static final int IPPROTO_TCP = 6, TCP_NOTSENT_LOWAT = 25;
    private static final MethodHandle GETSOCKOPT;

    static {
        Linker linker = Linker.nativeLinker();
        GETSOCKOPT = linker.downcallHandle(linker.defaultLookup().find("getsockopt").orElseThrow(),
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                ValueLayout.ADDRESS, ValueLayout.ADDRESS));
    }

    private SocketOptions() {}

    /** SO_SNDBUF as the kernel reports it: twice what was set, or what autotuning reached. */
    public static int sendBuffer(int fd) throws IOException {
        return get(fd, LinuxAbi.CURRENT.solSocket(), SO_SNDBUF);
    }

    /** TCP_NOTSENT_LOWAT: 0 when never set (the system's default applies). */
    public static int unsentLimit(int fd) throws IOException {
        return get(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT);
    }

    private static int get(int fd, int level, int option) throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment value = arena.allocate(ValueLayout.JAVA_INT);
            MemorySegment length = arena.allocate(ValueLayout.JAVA_INT);
            length.set(ValueLayout.JAVA_INT, 0, 4);
            int r = (int) GETSOCKOPT.invokeExact(fd, level, option, value, length);
            if (r < 0) throw new IOException("getsockopt(" + fd + ", " + level + ", " + option + ") failed");
            return value.get(ValueLayout.JAVA_INT, 0);
        } catch (IOException | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException(t);
        }
    }

    /**
     * The descriptor, in this process, of the TCP socket whose local port is {@code localPort} and whose peer's
     * port is {@code remotePort}; empty if this process holds none.
     */
    public static OptionalInt fdOf(int localPort, int remotePort) throws IOException {
        String inode = null;
        for (String table : List.of("/proc/net/tcp", "/proc/net/tcp6")) {
            for (String line : Files.readAllLines(Path.of(table))) {
                String[] f = line.trim().split("\\s+");
                if (f.length < 10 || !f[1].contains(":")) continue;
                if (port(f[1]) == localPort && port(f[2]) == remotePort) inode = f[9];
            }
        }
        if (inode == null) return OptionalInt.empty();
        try (var fds = Files.list(Path.of("/proc/self/fd"))) {
            for (Path p : (Iterable<Path>) fds::iterator) {
                try {
                    if (Files.readSymbolicLink(p).toString().equals("socket:[" + inode + "]")) {
                        return OptionalInt.of(Integer.parseInt(p.getFileName().toString()));
                    }
                } catch (IOException gone) {
                    // closed while listing
                }
            }
        }
        return OptionalInt.empty();
    }

    private static int port(String hexAddress) {
        return Integer.parseInt(hexAddress.substring(hexAddress.lastIndexOf(':') + 1), 16);
    }
}
