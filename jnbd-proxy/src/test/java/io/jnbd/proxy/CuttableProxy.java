package io.jnbd.proxy;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A TCP relay in front of an upstream NBD server that a test breaks the way a network or a machine does: hang
 * it (no byte moves and the connections stay open, as a stopped process), cut every connection (a crash the
 * client hears of at once) and refuse new ones (the server is down, until it is back on the same address).
 */
final class CuttableProxy implements AutoCloseable {
    private final ServerSocketChannel listener;
    private final InetSocketAddress target;
    private final Set<SocketChannel> open = ConcurrentHashMap.newKeySet();
    private final Object gate = new Object();
    private volatile boolean hung, refusing, closed;

    CuttableProxy(InetSocketAddress target) throws IOException {
        this.target = target;
        this.listener = ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0));
        Thread.ofVirtual().name("relay-accept").start(this::accept);
    }

    int port() throws IOException {
        return ((InetSocketAddress) listener.getLocalAddress()).getPort();
    }

    void hang(boolean on) {
        hung = on;
        if (!on) {
            synchronized (gate) {
                gate.notifyAll();
            }
        }
    }

    void refuse(boolean on) {
        refusing = on;
    }

    /** Resets every connection through the relay. */
    void cut() {
        for (SocketChannel c : open) closeQuietly(c);
        open.clear();
    }

    private void accept() {
        while (!closed) {
            SocketChannel client;
            try {
                client = listener.accept();
            } catch (IOException e) {
                return;
            }
            if (refusing) {
                closeQuietly(client);
                continue;
            }
            try {
                SocketChannel server = SocketChannel.open(target);
                open.add(client);
                open.add(server);
                Thread.ofVirtual().start(() -> pump(client, server));
                Thread.ofVirtual().start(() -> pump(server, client));
            } catch (IOException e) {
                closeQuietly(client);
            }
        }
    }

    private void pump(SocketChannel from, SocketChannel to) {
        ByteBuffer buf = ByteBuffer.allocateDirect(64 * 1024);
        try {
            while (true) {
                waitWhileHung();
                buf.clear();
                if (from.read(buf) < 0) break;
                waitWhileHung();
                buf.flip();
                while (buf.hasRemaining()) to.write(buf);
            }
        } catch (IOException | InterruptedException e) {
            // one side closed or was cut
        } finally {
            closeQuietly(from);
            closeQuietly(to);
            open.remove(from);
            open.remove(to);
        }
    }

    private void waitWhileHung() throws InterruptedException {
        synchronized (gate) {
            while (hung && !closed) gate.wait(100);
        }
    }

    @Override
    public void close() {
        closed = true;
        hang(false);
        closeQuietly(listener);
        cut();
    }

    private static void closeQuietly(java.io.Closeable c) {
        try {
            c.close();
        } catch (IOException ignored) {
            // already closed
        }
    }
}
