package io.jnbd.server.control;

import io.jnbd.server.control.ControlProtocol.Reply;
import io.jnbd.server.control.ControlProtocol.Request;
import io.jnbd.server.net.UnixPeer;
import java.io.IOException;
import java.net.ConnectException;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * One connection to a server's control socket, as {@code jnbd bitmap} uses it. It talks only to a server that runs
 * as this user or as root (SO_PEERCRED again, this way round): a socket someone else put at the path gets no request.
 * Every failure is a {@link Failed} with one line for the operator.
 */
public final class ControlClient implements AutoCloseable {

    /** What went wrong, in one line. */
    public static final class Failed extends Exception {
        public Failed(String message) {
            super(message, null, false, false);
        }
    }

    private final Path path;
    private final SocketChannel channel;
    private final Duration timeout;
    private final ByteBuffer in = ByteBuffer.allocate(ControlProtocol.MAX_LINE);

    private ControlClient(Path path, SocketChannel channel, Duration timeout) {
        this.path = path;
        this.channel = channel;
        this.timeout = timeout;
    }

    /** Connects to the control socket at {@code path} and reads its greeting; each exchange may take {@code timeout}. */
    public static ControlClient connect(Path path, Duration timeout) throws Failed {
        Path p = path.toAbsolutePath();
        SocketChannel ch;
        try {
            ch = SocketChannel.open(UnixDomainSocketAddress.of(p));
        } catch (IOException e) {
            throw new Failed(whyNotConnected(p, e));
        }
        ControlClient c = new ControlClient(p, ch, timeout);
        try {
            UnixPeer server = UnixPeer.of(ch);
            if (!server.selfOrRoot()) {
                throw new Failed("control socket " + p + " is served by " + server + ", neither you nor root: not talking to it");
            }
            ControlProtocol.checkGreeting(c.exchange(null));
            return c;
        } catch (ControlProtocol.BadLine e) {
            c.close();
            throw new Failed(e.getMessage());
        } catch (IOException e) {
            c.close();
            throw new Failed("control socket " + p + ": " + e.getMessage());
        } catch (Failed e) {
            c.close();
            throw e;
        }
    }

    /** The line for a failed connect: what is (or is not) at {@code p}, and what to do. */
    static String whyNotConnected(Path p, IOException e) {
        if (!Files.exists(p, LinkOption.NOFOLLOW_LINKS)) {
            return "no server control socket at " + p + " (is the server running with --control=" + p + "?)";
        }
        if (e instanceof ConnectException) {
            return "no server listening on control socket " + p + " (is the server running with --control=" + p + "?)";
        }
        String message = String.valueOf(e.getMessage());
        if (message.contains("Permission denied")) { // EACCES: the JDK makes it a BindException, even on connect
            String owner;
            try {
                owner = Files.getOwner(p, LinkOption.NOFOLLOW_LINKS).getName();
            } catch (IOException | RuntimeException x) {
                owner = "its owner";
            }
            return "permission denied on control socket " + p + ": only "
                + (owner.equals("root") ? "root" : owner + " (the server's user) and root") + " may use it";
        }
        return "cannot connect to control socket " + p + ": " + message;
    }

    /** Sends {@code request} and returns the server's reply, an error reply included. */
    public Reply call(Request request) throws Failed {
        try {
            return ControlProtocol.decodeReply(exchange(ControlProtocol.encode(request)));
        } catch (ControlProtocol.BadLine e) {
            throw new Failed("control socket " + path + ": " + e.getMessage());
        } catch (IOException e) {
            throw new Failed("control socket " + path + ": " + e.getMessage());
        }
    }

    /** Writes {@code line} (none: null) and reads the line that answers it, all within the timeout. */
    private String exchange(String line) throws IOException {
        var deadline = CompletableFuture.runAsync(this::close, CompletableFuture.delayedExecutor(timeout.toMillis(), TimeUnit.MILLISECONDS));
        try {
            if (line != null) {
                ByteBuffer out = ByteBuffer.wrap((line + "\n").getBytes(StandardCharsets.UTF_8));
                while (out.hasRemaining()) channel.write(out);
            }
            while (true) {
                for (int i = 0; i < in.position(); i++) {
                    if (in.get(i) != '\n') continue;
                    String reply = new String(in.array(), 0, i, StandardCharsets.UTF_8);
                    in.flip().position(i + 1);
                    in.compact();
                    return reply;
                }
                if (!in.hasRemaining()) throw new IOException("a reply longer than " + ControlProtocol.MAX_LINE + " bytes");
                if (channel.read(in) < 0) throw new IOException("the server closed the connection without a reply");
            }
        } catch (java.nio.channels.ClosedChannelException e) {
            throw new IOException(deadline.isDone() ? "no reply within " + timeout.toSeconds() + " s" : "connection closed", e);
        } finally {
            deadline.cancel(false);
        }
    }

    @Override
    public void close() {
        try {
            channel.close();
        } catch (IOException e) {
            // nothing left to do with it
        }
    }
}
