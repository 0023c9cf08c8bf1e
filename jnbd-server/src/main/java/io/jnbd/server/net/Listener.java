package io.jnbd.server.net;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * A listening socket, TCP or Unix, and the sockets it accepts, each handed out as a {@link Transport}: the one
 * place the server binds, accepts and sets socket options, so that what the rest of the server sees of a client is
 * its transport and its address.
 */
public final class Listener implements AutoCloseable {
    private static final Path SOMAXCONN = Path.of("/proc/sys/net/core/somaxconn");

    private final ServerSocketChannel channel;
    /** The socket file this listener created, removed at close; null for TCP and for a socket it was given. */
    private final Path unixPath;
    private final SocketAddress bound;
    /** Null for a socket bound here; for one passed by socket activation, its name there (or "" without one). */
    private final String activationName;

    private Listener(ServerSocketChannel channel, Path unixPath) throws IOException {
        this(channel, unixPath, channel.getLocalAddress(), null);
    }

    private Listener(ServerSocketChannel channel, Path unixPath, SocketAddress bound, String activationName) {
        this.channel = channel;
        this.unixPath = unixPath;
        this.bound = bound;
        this.activationName = activationName;
    }

    /**
     * A listener on a socket someone else bound ({@link SocketActivation}): {@code address} is where it listens,
     * and its socket file, if any, is not this listener's to remove.
     */
    static Listener adopt(ServerSocketChannel channel, SocketAddress address, String name) {
        return new Listener(channel, null, address, name == null ? "" : name);
    }

    /** Whether the socket was passed by socket activation rather than bound here. */
    public boolean activated() {
        return activationName != null;
    }

    /** How the log names it: its address, and for a passed socket where it came from. */
    public String describe() {
        String where = bound instanceof java.net.InetSocketAddress inet ? inet.getHostString() + ":" + inet.getPort() : String.valueOf(bound);
        if (activationName == null) return where;
        return where + " (passed by socket activation" + (activationName.isEmpty() ? "" : ", " + activationName) + ")";
    }

    /**
     * Binds {@code address} with {@code backlog} (0: the system's limit, see {@link #systemBacklog}). A Unix socket
     * file left behind by a server that died is removed first; one a live server still answers on is not.
     */
    public static Listener bind(SocketAddress address, int backlog) throws IOException {
        int queue = backlog > 0 ? backlog : systemBacklog();
        if (address instanceof UnixDomainSocketAddress unix) {
            if (Files.exists(unix.getPath()) && !isLive(unix)) Files.delete(unix.getPath());
            ServerSocketChannel ch = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
            try {
                ch.bind(unix, queue);
                return new Listener(ch, unix.getPath());
            } catch (IOException | RuntimeException e) {
                ch.close();
                throw e;
            }
        }
        ServerSocketChannel ch = ServerSocketChannel.open();
        try {
            ch.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            ch.bind(address, queue);
            return new Listener(ch, null);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    /** A client's socket as a transport, and its address (null if the socket cannot tell: a Unix socket's peer). */
    public record Accepted(Transport transport, SocketAddress remote) {
        /** Whether the client is on this host: a Unix socket, or a loopback address. */
        public boolean local() {
            return !(remote instanceof InetSocketAddress inet) || inet.getAddress().isLoopbackAddress();
        }
    }

    /**
     * Waits for the next client. A socket that fails before it becomes a transport is closed and the next one
     * waited for; a closed listener throws {@link java.nio.channels.ClosedChannelException}.
     */
    public Accepted accept() throws IOException {
        while (true) {
            SocketChannel ch = channel.accept();
            SocketAddress remote = null;
            try {
                remote = ch.getRemoteAddress();
            } catch (IOException e) {
                // unnamed (a Unix socket's client) or already gone: the handshake finds out which
            }
            try {
                // The send buffer is sized when the transmission phase starts, once TLS or not is known.
                if (remote instanceof InetSocketAddress) ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            } catch (IOException ignored) {
                // the options are optimisations only
            }
            try {
                return new Accepted(Transports.plain(ch), remote);
            } catch (IOException e) {
                closeQuietly(ch);
                if (!channel.isOpen()) throw e;
            }
        }
    }

    public SocketAddress address() {
        return bound;
    }

    /** Stops listening; a Unix socket's file goes too. */
    @Override
    public void close() {
        closeQuietly(channel);
        if (unixPath != null) {
            try {
                Files.deleteIfExists(unixPath);
            } catch (IOException ignored) {
                // best effort
            }
        }
    }

    /**
     * The most connections the kernel queues for accept. A smaller queue overflows when many clients connect
     * at once (a diskless site booting): the kernel then drops their handshakes or answers with SYN cookies,
     * and those clients wait for retransmissions, up to half a minute.
     */
    public static int systemBacklog() {
        try {
            // Not Files.readString: a sysctl file reports size 0, and that read stops after its first byte.
            return Math.max(128, Integer.parseInt(Files.readAllLines(SOMAXCONN).getFirst().strip()));
        } catch (IOException | RuntimeException e) {
            return 4096; // the kernel's default since Linux 5.4; it caps the value at its own limit anyway
        }
    }

    /** Whether a peer's address is one of this host's own: its traffic then goes over loopback. */
    public static boolean onThisHost(java.net.InetAddress address) {
        if (address.isLoopbackAddress() || address.isAnyLocalAddress()) return true;
        try {
            return java.net.NetworkInterface.getByInetAddress(address) != null;
        } catch (IOException e) {
            return false;
        }
    }

    private static boolean isLive(UnixDomainSocketAddress unix) {
        try (SocketChannel probe = SocketChannel.open(unix)) {
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    private static void closeQuietly(java.io.Closeable c) {
        try {
            c.close();
        } catch (IOException ignored) {
            // closing is best effort
        }
    }
}
