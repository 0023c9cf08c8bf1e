package io.jnbd.interop;

import io.jnbd.tls.RawChannel;
import io.jnbd.tls.SecureChannel;
import io.jnbd.tls.TlsClient;
import io.jnbd.tls.TlsClientSettings;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * A client for option haggling by hand, in plain text or, after STARTTLS, through jnbd-tls's TLS client: for the
 * TLS corners no real peer produces (a second STARTTLS, bytes that are not TLS, a client that stops inside a
 * record). Written from doc/proto.md; every read waits at most 30 s.
 */
final class OptionClient implements AutoCloseable {
    static final long IHAVEOPT = 0x49484156454F5054L;
    static final long OPTION_REPLY_MAGIC = 0x3e889045565a9L;
    static final int OPT_LIST = 3, OPT_STARTTLS = 5, OPT_INFO = 6, OPT_GO = 7, OPT_STRUCTURED_REPLY = 8;
    static final int REP_ACK = 1, REP_SERVER = 2, REP_INFO = 3;
    static final int REP_ERR_POLICY = 0x80000002, REP_ERR_INVALID = 0x80000003, REP_ERR_TLS_REQD = 0x80000005;

    final SocketChannel channel;
    private final java.io.InputStream socketIn;
    private SecureChannel tls;

    /** One option reply: its type and data. */
    record Reply(int type, byte[] data) {
        String text() {
            return new String(data, StandardCharsets.UTF_8);
        }
    }

    /** Connects, reads the greeting and sends the client flags (fixed newstyle, no zeroes). */
    OptionClient(int port) throws IOException {
        channel = SocketChannel.open(new InetSocketAddress("127.0.0.1", port));
        channel.socket().setSoTimeout(30_000);
        socketIn = channel.socket().getInputStream();
        ByteBuffer greeting = read(18);
        if (greeting.getLong(8) != IHAVEOPT) throw new IOException("no fixed newstyle greeting");
        write(ByteBuffer.allocate(4).putInt(3).flip());
    }

    /** Sends an option and reads its replies up to the final one (ACK or an error). */
    List<Reply> option(int option, byte[] data) throws IOException {
        write(ByteBuffer.allocate(16 + data.length).putLong(IHAVEOPT).putInt(option).putInt(data.length).put(data).flip());
        List<Reply> out = new ArrayList<>();
        while (true) {
            ByteBuffer h = read(20);
            if (h.getLong() != OPTION_REPLY_MAGIC) throw new IOException("bad option reply magic");
            if (h.getInt() != option) throw new IOException("reply to another option");
            int type = h.getInt();
            byte[] body = new byte[h.getInt()];
            read(ByteBuffer.wrap(body));
            out.add(new Reply(type, body));
            if (type == REP_ACK || type < 0) return out;
        }
    }

    /** The data of NBD_OPT_INFO and NBD_OPT_GO for {@code export}, with no information requests. */
    static byte[] exportRequest(String export) {
        byte[] name = export.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(4 + name.length + 2).putInt(name.length).put(name).putShort((short) 0).array();
    }

    /** Export names in LIST's replies. */
    static List<String> names(List<Reply> replies) {
        List<String> out = new ArrayList<>();
        for (Reply r : replies) {
            if (r.type() != REP_SERVER) continue;
            ByteBuffer b = ByteBuffer.wrap(r.data());
            byte[] name = new byte[b.getInt()];
            b.get(name);
            out.add(new String(name, StandardCharsets.UTF_8));
        }
        return out;
    }

    /** The TLS handshake, once STARTTLS was acknowledged: from here on everything goes through the session. */
    void handshake(TlsClientSettings settings) throws IOException {
        RawChannel raw = new RawChannel() {
            @Override
            public int read(ByteBuffer dst) throws IOException {
                byte[] b = new byte[Math.min(dst.remaining(), 1 << 16)];
                int n = socketIn.read(b);
                if (n > 0) dst.put(b, 0, n);
                return n;
            }

            @Override
            public void write(ByteBuffer src) throws IOException {
                while (src.hasRemaining()) channel.write(src);
            }
        };
        try {
            tls = TlsClient.load(settings).connect(raw);
        } catch (io.jnbd.tls.TlsConfigException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Bytes straight onto the socket, beneath TLS if it is up. */
    void writeRaw(byte[] bytes) throws IOException {
        ByteBuffer b = ByteBuffer.wrap(bytes);
        while (b.hasRemaining()) channel.write(b);
    }

    /** True once the server has closed the connection (end of stream or reset); false if it sends something instead. */
    boolean closedByServer() throws IOException {
        try {
            if (tls != null) return tls.read(ByteBuffer.allocate(1)) < 0;
            return socketIn.read() < 0;
        } catch (SocketTimeoutException e) {
            throw new AssertionError("the server neither answered nor closed within 30 s");
        } catch (IOException e) {
            return true; // a reset, or TLS reporting the connection gone
        }
    }

    private void write(ByteBuffer b) throws IOException {
        if (tls != null) {
            tls.write(b);
            return;
        }
        while (b.hasRemaining()) channel.write(b);
    }

    private ByteBuffer read(int n) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(n);
        read(b);
        return b.flip();
    }

    private void read(ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            int n;
            if (tls != null) {
                n = tls.read(b);
            } else {
                byte[] tmp = new byte[b.remaining()];
                n = socketIn.read(tmp);
                if (n > 0) b.put(tmp, 0, n);
            }
            if (n < 0) throw new EOFException("the server closed the connection");
        }
    }

    @Override
    public void close() throws IOException {
        channel.close();
    }
}
