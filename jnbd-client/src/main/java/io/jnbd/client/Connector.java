package io.jnbd.client;

import io.jnbd.tls.TlsClient;
import io.jnbd.tls.TlsClientSettings;
import io.jnbd.tls.TlsConfigException;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.InetSocketAddress;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/** Opening connections: the socket, the handshake under a deadline, and the extra connections of multi-conn. */
final class Connector {

    private Connector() {
    }

    /**
     * The client's one timer thread: handshake deadlines and each connection's timeout sweep. Stop it with
     * {@link #stopTimer}: the sweep completes callers' futures, so their callbacks run on this thread.
     */
    static ScheduledExecutorService newTimer() {
        ScheduledThreadPoolExecutor timer = new ScheduledThreadPoolExecutor(1, r -> Thread.ofPlatform().daemon().name("jnbd-timer").unstarted(r));
        timer.setExecuteExistingDelayedTasksAfterShutdownPolicy(false);
        return timer;
    }

    /**
     * Stops the timer without interrupting it. A caller's callback may be running on it, even the one that closes
     * this client; interrupted, its next send on another client's socket would close that socket too (an
     * interrupted thread's channel I/O does), and a healthy server would be lost with this one.
     */
    static void stopTimer(ScheduledExecutorService timer) {
        timer.shutdown();
    }

    /**
     * Opens the first connection and, with {@link ClientOptions#connections()} above one, further ones only if
     * the server advertises CAN_MULTI_CONN (otherwise their caches could disagree).
     */
    static List<Lane> openAll(NbdUri uri, ClientOptions options, ScheduledExecutorService timer) throws IOException {
        TlsClient tls = loadTls(uri, options);
        List<Connection> opened = onPlatformThread(() -> openAllHere(uri, options, tls, timer));
        if (!options.reconnects()) return List.copyOf(opened);
        List<Lane> lanes = new ArrayList<>();
        for (int i = 0; i < opened.size(); i++) {
            int index = i;
            // Each connection comes back on its own; the first's description is what every one must find again.
            Redial.Opener opener = timeout -> onPlatformThread(
                () -> open(uri, options.withConnectTimeout(timeout), tls, timer, index, null, null));
            lanes.add(new Redial(opened.get(i), opener, peer(uri), index, options));
        }
        return lanes;
    }

    /**
     * The TLS context for {@code uri}, or null for a plain connection. Loaded once, before connecting, so that a
     * missing certificate or key file is reported as such instead of as a failed handshake, and multi-conn's
     * connections share it.
     */
    private static TlsClient loadTls(NbdUri uri, ClientOptions options) throws NbdConfigException {
        TlsClientSettings settings = options.tlsFor(uri);
        if (settings == null) return null;
        try {
            return TlsClient.load(settings);
        } catch (TlsConfigException e) {
            throw new NbdConfigException(e.getMessage(), e);
        }
    }

    private static List<Connection> openAllHere(NbdUri uri, ClientOptions options, TlsClient tls,
                                                ScheduledExecutorService timer) throws IOException {
        List<Connection> opened = new ArrayList<>();
        try {
            Connection first = open(uri, options, tls, timer, 0, null, null);
            opened.add(first);
            ExportInfo info = first.info();
            int want = info.canMultiConn() ? options.connections() : 1;
            // The others side by side: each handshake is a few round trips of waiting, and one after another
            // they were a tenth of a second of a short copy's run.
            List<CompletableFuture<Connection>> others = new ArrayList<>();
            for (int i = 1; i < want; i++) {
                int index = i;
                CompletableFuture<Connection> f = new CompletableFuture<>();
                Thread.ofPlatform().daemon().name("jnbd-connect-" + index).start(() -> {
                    try {
                        f.complete(open(uri, options, tls, timer, index, info, first.metaContexts()));
                    } catch (Throwable t) {
                        f.completeExceptionally(t);
                    }
                });
                others.add(f);
            }
            Throwable failure = null;
            for (CompletableFuture<Connection> f : others) {
                try {
                    opened.add(f.join());
                } catch (java.util.concurrent.CompletionException e) {
                    if (failure == null) failure = e.getCause();
                }
            }
            if (failure instanceof IOException io) throw io;
            if (failure instanceof RuntimeException re) throw re;
            if (failure instanceof Error err) throw err;
            if (failure != null) throw new IOException(failure);
            return opened;
        } catch (IOException | RuntimeException e) {
            for (Connection c : opened) c.close(0);
            throw e;
        }
    }

    static List<ExportListing> list(NbdUri uri, ClientOptions options) throws IOException {
        TlsClient tls = loadTls(uri, options);
        return onPlatformThread(() -> listHere(uri, options, tls));
    }

    private static List<ExportListing> listHere(NbdUri uri, ClientOptions options, TlsClient tls) throws IOException {
        ScheduledExecutorService timer = newTimer();
        try (SocketChannel channel = openChannel(uri, options)) {
            return withDeadline(channel, uri, options, timer,
                () -> new Handshake(Transport.plain(channel), peer(uri), tls).list());
        } finally {
            stopTimer(timer);
        }
    }

    static List<String> listMetaContexts(NbdUri uri, ClientOptions options, List<String> queries) throws IOException {
        TlsClient tls = loadTls(uri, options);
        return onPlatformThread(() -> {
            ScheduledExecutorService timer = newTimer();
            try (SocketChannel channel = openChannel(uri, options)) {
                return withDeadline(channel, uri, options, timer,
                    () -> new Handshake(Transport.plain(channel), peer(uri), tls).listMetaContexts(uri.exportName(), queries));
            } finally {
                stopTimer(timer);
            }
        });
    }

    private static Connection open(NbdUri uri, ClientOptions options, TlsClient tls, ScheduledExecutorService timer,
                                   int index, ExportInfo expected, List<String> expectedContexts) throws IOException {
        SocketChannel channel = openChannel(uri, options);
        try {
            // The deadline covers the TLS handshake too: closing the socket ends it wherever it waits.
            Handshake.Result result = withDeadline(channel, uri, options, timer,
                () -> new Handshake(Transport.plain(channel), peer(uri), tls).go(uri.exportName(), options.structuredReplies(), options.metaContexts(), options.reconnects()));
            if (expected != null && (result.info().size() != expected.size()
                || result.info().transmissionFlags() != expected.transmissionFlags()
                || !List.copyOf(result.contexts().values()).equals(expectedContexts))) {
                throw new NbdException(peer(uri) + " described the export differently on connection " + index);
            }
            return new Connection(peer(uri), result, timer, options, index);
        } catch (IOException | RuntimeException e) {
            channel.close();
            throw e;
        }
    }

    private interface HandshakeStep<T> {
        T run() throws IOException;
    }

    /**
     * Runs {@code step} on a platform thread when the caller is a virtual one. The JDK puts a socket in
     * non-blocking mode for good once a virtual thread blocks on it; a connection's reader thread would then pay
     * a failed read and a poll before every read it makes (measured: 14,203 EAGAIN reads and 14,196 polls in a
     * pool's serve process over 3 s of 4k writes, none when connected from a platform thread).
     */
    private static <T> T onPlatformThread(HandshakeStep<T> step) throws IOException {
        if (!Thread.currentThread().isVirtual()) return step.run();
        CompletableFuture<T> done = new CompletableFuture<>();
        Thread.ofPlatform().daemon().name("jnbd-connect").start(() -> {
            try {
                done.complete(step.run());
            } catch (Throwable t) {
                done.completeExceptionally(t);
            }
        });
        try {
            return done.get();
        } catch (ExecutionException e) {
            if (e.getCause() instanceof IOException io) throw io;
            if (e.getCause() instanceof RuntimeException r) throw r;
            if (e.getCause() instanceof Error err) throw err;
            throw new IOException(e.getCause());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while connecting");
        }
    }

    /** Runs the handshake with a watchdog that closes the channel if the server stalls past the connect timeout. */
    private static <T> T withDeadline(SocketChannel channel, NbdUri uri, ClientOptions options,
                                      ScheduledExecutorService timer, HandshakeStep<T> step) throws IOException {
        AtomicBoolean fired = new AtomicBoolean();
        ScheduledFuture<?> watchdog = timer.schedule(() -> {
            fired.set(true);
            try {
                channel.close();
            } catch (IOException ignored) {
                // Closing is the whole point.
            }
        }, options.connectTimeout().toMillis(), TimeUnit.MILLISECONDS);
        try {
            return step.run();
        } catch (IOException e) {
            if (fired.get()) {
                throw new NbdConnectionException("handshake with " + peer(uri) + " timed out after "
                    + options.connectTimeout().toMillis() + " ms", e);
            }
            throw e;
        } finally {
            watchdog.cancel(false);
        }
    }

    private static SocketChannel openChannel(NbdUri uri, ClientOptions options) throws IOException {
        boolean tcp = uri.address() instanceof InetSocketAddress;
        SocketChannel channel = tcp ? SocketChannel.open() : SocketChannel.open(StandardProtocolFamily.UNIX);
        try {
            if (tcp) {
                InetSocketAddress address = (InetSocketAddress) uri.address();
                if (address.isUnresolved()) throw new NbdConnectionException("cannot resolve host " + address.getHostString(), null);
                channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
                channel.socket().connect(address, (int) Math.min(Integer.MAX_VALUE, options.connectTimeout().toMillis()));
            } else {
                channel.connect(uri.address());
            }
            return channel;
        } catch (IOException e) {
            channel.close();
            if (e instanceof NbdException) throw e;
            throw new NbdConnectionException("cannot connect to " + peer(uri) + ": " + e.getMessage(), e);
        }
    }

    private static String peer(NbdUri uri) {
        return switch (uri.address()) {
            case InetSocketAddress a -> a.getHostString() + ":" + a.getPort();
            default -> uri.address().toString();
        };
    }
}
