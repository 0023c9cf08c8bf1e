package io.jnbd.server.net;

import io.jnbd.server.io.InheritedSocket;
import io.jnbd.server.io.LinuxAbi;
import io.jnbd.server.io.NativeSocket;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * systemd's socket activation (sd_listen_fds(3)): when LISTEN_PID is this process and LISTEN_FDS is n, descriptors
 * 3 to 3+n-1 are listening sockets that systemd (or {@code systemd-socket-activate}) bound and keeps. The server
 * serves them instead of binding its own, so a client that connects while the server restarts waits in the
 * kernel's accept queue of a socket that never closed, instead of being refused.
 *
 * <p>How a descriptor becomes a {@link ServerSocketChannel}: the JDK has no public way to wrap one. Its own
 * {@code System.inheritedChannel()} takes only descriptor 0, once per JVM, and its channel's close points 0, 1 and 2
 * at /dev/null (the server's log goes to 2); building the JDK's channel class ourselves would need
 * {@code --add-opens} of two packages and their private constructors. Instead a channel is opened and bound the
 * ordinary way (to a loopback port, or an automatic Unix path, that nobody knows) and then its descriptor is made to
 * refer to the inherited socket with dup3: the JDK keeps using the descriptor number it owns, now the inherited
 * socket, and every call it makes on a bound listening channel (accept, close, blocking or not) works on that
 * socket alike. The one thing the JDK remembers of the throwaway bind is the local address, which
 * {@link Listener#address()} takes from the socket itself instead. Reading the channel's descriptor number needs
 * {@code --add-exports java.base/sun.nio.ch}, which bin/jnbd already passes for sendfile.
 */
public final class SocketActivation {
    private SocketActivation() {}

    /** The first descriptor passed (SD_LISTEN_FDS_START). */
    private static final int FIRST_FD = 3;
    private static final List<String> VARIABLES = List.of("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES");

    /** Socket activation asked for but not usable: the message says why. */
    public static final class Unusable extends IOException {
        Unusable(String message) {
            super(message);
        }
    }

    /** The sockets passed to this process as listeners, in descriptor order; empty when none were passed. */
    public static List<Listener> inherited() throws Unusable {
        return inherited(System.getenv(), ProcessHandle.current().pid(), FIRST_FD);
    }

    /**
     * The sockets {@code env} passes to process {@code pid}, from descriptor {@code firstFd} on (3 but in tests).
     * LISTEN_* are removed from the C environment once read
     * (as sd_listen_fds(3) does when asked to), so that they are read once.
     */
    static List<Listener> inherited(Map<String, String> env, long pid, int firstFd) throws Unusable {
        String forPid = env.get("LISTEN_PID");
        String fds = env.get("LISTEN_FDS");
        if (forPid == null || fds == null) return List.of();
        if (!forPid.strip().equals(Long.toString(pid))) return List.of(); // meant for the process that started us
        int n;
        try {
            n = Integer.parseInt(fds.strip());
        } catch (NumberFormatException e) {
            throw new Unusable("LISTEN_FDS=" + fds + " is not a number");
        }
        if (n < 1) return List.of();
        if (LinuxAbi.CURRENT == null || !NativeSocket.AVAILABLE) {
            throw new Unusable("socket activation needs native access (--enable-native-access=ALL-UNNAMED) on Linux");
        }
        String[] names = env.getOrDefault("LISTEN_FDNAMES", "").split(":", -1);
        for (String v : VARIABLES) InheritedSocket.unsetenv(v);
        List<Listener> listeners = new ArrayList<>();
        try {
            for (int i = 0; i < n; i++) {
                int fd = firstFd + i;
                String name = i < names.length && !names[i].isEmpty() ? names[i] : null;
                try {
                    listeners.add(adopt(fd, name));
                } catch (IOException e) {
                    throw new Unusable("LISTEN_FDS socket " + fd + (name == null ? "" : " (" + name + ")") + ": " + e.getMessage());
                }
            }
        } catch (Unusable e) {
            listeners.forEach(Listener::close);
            throw e;
        }
        return listeners;
    }

    /** A listener serving the listening socket on {@code fd}, which this moves onto a channel of the JDK's. */
    private static Listener adopt(int fd, String name) throws IOException {
        int family = InheritedSocket.listeningStreamFamily(fd);
        SocketAddress address = InheritedSocket.localAddress(fd);
        ServerSocketChannel channel;
        Path placeholder = null;
        if (family == InheritedSocket.AF_UNIX) {
            channel = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
            channel.bind(null, 1); // an automatic path in the temporary directory, removed below
            placeholder = ((UnixDomainSocketAddress) channel.getLocalAddress()).getPath();
        } else if (family == InheritedSocket.AF_INET || family == InheritedSocket.AF_INET6) {
            // The JDK's default family, as its own inherited channels take whatever the socket's family
            channel = ServerSocketChannel.open();
            channel.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 1);
        } else {
            throw new IOException("a socket of address family " + family);
        }
        try {
            int own = NativeSocket.fd(channel);
            if (own < 0) {
                throw new IOException("cannot see the JDK channel's descriptor: run with "
                    + "--add-exports java.base/sun.nio.ch=ALL-UNNAMED (bin/jnbd does)");
            }
            InheritedSocket.moveOnto(fd, own);
        } catch (IOException | RuntimeException e) {
            channel.close();
            throw e;
        } finally {
            if (placeholder != null) Files.deleteIfExists(placeholder);
        }
        return Listener.adopt(channel, address, name);
    }
}
