package io.jnbd.tls;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

/** A connected pair of loopback sockets, and TLS sessions run over them. */
final class Loopback implements AutoCloseable {
    final SocketChannel server;
    final SocketChannel client;

    private Loopback(SocketChannel server, SocketChannel client) {
        this.server = server;
        this.client = client;
    }

    static Loopback open() throws IOException {
        try (ServerSocketChannel listener = ServerSocketChannel.open()) {
            listener.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            SocketChannel client = SocketChannel.open(listener.getLocalAddress());
            return new Loopback(listener.accept(), client);
        }
    }

    RawChannel serverRaw() {
        return new SocketRawChannel(server);
    }

    RawChannel clientRaw() {
        return new SocketRawChannel(client);
    }

    /** Both ends of a session, once both handshakes finished. */
    record Sessions(SecureChannel server, SecureChannel client) implements AutoCloseable {
        @Override
        public void close() {
            client.close();
            server.close();
        }
    }

    /** Runs the server's handshake on another thread and the client's here; either failure is thrown. */
    Sessions handshake(TlsServer tlsServer, TlsClient tlsClient) throws Exception {
        CompletableFuture<SecureChannel> s = acceptAsync(tlsServer);
        SecureChannel c;
        try {
            c = tlsClient.connect(clientRaw());
        } catch (TlsException e) {
            closeQuietly();
            awaitQuietly(s);
            throw e;
        }
        return new Sessions(await(s), c);
    }

    CompletableFuture<SecureChannel> acceptAsync(TlsServer tlsServer) {
        return acceptAsync(tlsServer, serverRaw());
    }

    static CompletableFuture<SecureChannel> acceptAsync(TlsServer tlsServer, RawChannel raw) {
        CompletableFuture<SecureChannel> f = new CompletableFuture<>();
        Thread.ofVirtual().start(() -> {
            try {
                f.complete(tlsServer.accept(raw, "test client"));
            } catch (Throwable e) {
                f.completeExceptionally(e);
            }
        });
        return f;
    }

    static <T> T await(CompletableFuture<T> f) throws Exception {
        try {
            return f.get(60, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Exception x) throw x;
            throw e;
        }
    }

    private static void awaitQuietly(CompletableFuture<?> f) {
        try {
            f.get(60, TimeUnit.SECONDS);
        } catch (Exception ignored) {
            // the caller reports the client's failure
        }
    }

    void closeQuietly() {
        try {
            client.close();
            server.close();
        } catch (IOException ignored) {
            // test teardown
        }
    }

    @Override
    public void close() throws IOException {
        client.close();
        server.close();
    }
}
