package io.jnbd.server;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

/**
 * A TCP proxy in front of a server (a memory server, an upstream NBD server) that a test can break the way networks and machines break: hang it
 * (no byte moves either way and the connections stay open, as a SIGSTOPped process or a partition), slow it,
 * cut every connection (a crash the client hears of at once), refuse new connections (the server is down), and
 * point it at another server (the same address after a restart).
 */
public final class FaultyProxy implements AutoCloseable {
    private final ServerSocketChannel listener;
    private final Set<SocketChannel> open = ConcurrentHashMap.newKeySet();
    private volatile InetSocketAddress target;
    private volatile boolean hung, refusing, closed;
    private volatile long delayNanos;
    private final LongAdder toClient = new LongAdder();
    private final Object gate = new Object();

    public FaultyProxy(InetSocketAddress target) throws IOException {
        this.target = target;
        this.listener = ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0));
        Thread.ofVirtual().name("proxy-accept").start(this::accept);
    }

    public int port() throws IOException {
        return ((InetSocketAddress) listener.getLocalAddress()).getPort();
    }

    public String address() throws IOException {
        return "127.0.0.1:" + port();
    }

    public void retarget(InetSocketAddress t) {
        target = t;
    }

    public void hang(boolean on) {
        hung = on;
        if (!on) {
            synchronized (gate) {
                gate.notifyAll();
            }
        }
    }

    public void delay(Duration d) {
        delayNanos = d.toNanos();
    }

    public void refuse(boolean on) {
        refusing = on;
    }

    /** Resets every connection through the proxy. */
    public void cut() {
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
                Thread.ofVirtual().start(() -> pump(client, server, null));
                Thread.ofVirtual().start(() -> pump(server, client, toClient));
            } catch (IOException e) {
                closeQuietly(client); // the server behind is gone: as if this address refused
            }
        }
    }

    /** Bytes the server behind has sent its clients, replies and read data: what the pool fetched. */
    public long bytesToClients() {
        return toClient.sum();
    }

    private void pump(SocketChannel from, SocketChannel to, LongAdder counted) {
        ByteBuffer buf = ByteBuffer.allocateDirect(64 * 1024);
        try {
            while (true) {
                waitWhileHung();
                buf.clear();
                if (from.read(buf) < 0) break;
                waitWhileHung();
                long d = delayNanos;
                if (d > 0) Thread.sleep(Duration.ofNanos(d));
                buf.flip();
                if (counted != null) counted.add(buf.remaining());
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
