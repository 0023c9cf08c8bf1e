package io.jnbd.client;

import io.jnbd.protocol.Info;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.OptionHeader;
import io.jnbd.protocol.OptionReplyHeader;
import io.jnbd.protocol.Request;
import io.jnbd.protocol.SimpleReply;
import io.jnbd.protocol.Strings;
import io.jnbd.tls.RawChannel;
import io.jnbd.tls.SecureChannel;
import io.jnbd.tls.TlsServer;

import java.io.EOFException;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.concurrent.CountDownLatch;

/**
 * A small NBD server with STARTTLS for the client's TLS tests: jnbd-tls's own server side, so that the tests
 * need no peer binary and can misbehave on purpose (see {@link Mode}). Simple replies only; one client at a
 * time, each on the accepting thread.
 */
final class TlsTestServer implements AutoCloseable {

    enum Mode {
        /** STARTTLS, then options and transmission over TLS. */
        TLS,
        /** STARTTLS is answered with NBD_REP_ERR_POLICY, as a server without TLS would. */
        REFUSE,
        /** STARTTLS is acknowledged, and then nothing: the TLS handshake never gets an answer. */
        SILENT_AFTER_ACK,
        /** As TLS, but the reply to the first read stops in the middle of its TLS record, for good. */
        STALL_MID_RECORD
    }

    /** The one export's name, as LIST reports it (GO accepts any). */
    static final String EXPORT = "secret";

    private final ServerSocketChannel listener;
    private final TlsServer tls;
    private final Mode mode;
    private final byte[] disk;
    private final Thread thread;
    private volatile SocketChannel current;
    /** Counted down once the stalled reply has sent the first half of its record. */
    final CountDownLatch stalled = new CountDownLatch(1);

    TlsTestServer(TlsServer tls, Mode mode, int size) throws IOException {
        this.tls = tls;
        this.mode = mode;
        this.disk = new byte[size];
        for (int i = 0; i < size; i++) disk[i] = (byte) (i * 13 + 5);
        this.listener = ServerSocketChannel.open().bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        this.thread = Thread.ofPlatform().daemon().name("tls-test-server").start(this::acceptLoop);
    }

    int port() {
        try {
            return ((InetSocketAddress) listener.getLocalAddress()).getPort();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    byte[] disk() {
        return disk;
    }

    private void acceptLoop() {
        while (listener.isOpen()) {
            try (SocketChannel ch = listener.accept()) {
                current = ch;
                serve(ch);
            } catch (IOException e) {
                // The client went away or the test closed us: on to the next one.
            }
        }
    }

    private void serve(SocketChannel ch) throws IOException {
        Cuttable raw = new Cuttable(ch);
        Stream s = new Stream(raw, null);
        s.write(ByteBuffer.allocate(18).putLong(Nbd.NBDMAGIC).putLong(Nbd.IHAVEOPT)
            .putShort((short) (Nbd.FLAG_FIXED_NEWSTYLE | Nbd.FLAG_NO_ZEROES)).flip());
        s.read(4);
        while (true) {
            OptionHeader oh = decodeOption(s.read(Nbd.OPTION_HEADER_SIZE));
            if (oh == null) return;
            s.read((int) oh.length());
            switch (oh.option()) {
                case Nbd.OPT_STARTTLS -> {
                    if (mode == Mode.REFUSE) {
                        optionReply(s, oh.option(), Nbd.REP_ERR_POLICY, ByteBuffer.wrap(Strings.utf8("TLS is not configured")));
                        continue;
                    }
                    optionReply(s, oh.option(), Nbd.REP_ACK, ByteBuffer.allocate(0));
                    if (mode == Mode.SILENT_AFTER_ACK) {
                        awaitClose(ch);
                        return;
                    }
                    s = new Stream(raw, tls.accept(raw, "test client"));
                }
                case Nbd.OPT_GO -> {
                    if (s.secure == null) {
                        optionReply(s, oh.option(), Nbd.REP_ERR_TLS_REQD, ByteBuffer.allocate(0));
                        continue;
                    }
                    Info info = new Info.Export(disk.length, Nbd.FLAG_HAS_FLAGS | Nbd.FLAG_SEND_FLUSH);
                    ByteBuffer b = ByteBuffer.allocate(info.encodedLength());
                    info.encode(b);
                    optionReply(s, oh.option(), Nbd.REP_INFO, b.flip());
                    optionReply(s, oh.option(), Nbd.REP_ACK, ByteBuffer.allocate(0));
                    transmission(s, raw);
                    return;
                }
                case Nbd.OPT_LIST -> {
                    if (s.secure == null) {
                        optionReply(s, oh.option(), Nbd.REP_ERR_TLS_REQD, ByteBuffer.allocate(0));
                        continue;
                    }
                    byte[] name = Strings.utf8(EXPORT);
                    optionReply(s, oh.option(), Nbd.REP_SERVER, ByteBuffer.allocate(4 + name.length).putInt(name.length).put(name).flip());
                    optionReply(s, oh.option(), Nbd.REP_ACK, ByteBuffer.allocate(0));
                }
                case Nbd.OPT_ABORT -> {
                    optionReply(s, oh.option(), Nbd.REP_ACK, ByteBuffer.allocate(0));
                    return;
                }
                default -> optionReply(s, oh.option(),
                    s.secure == null ? Nbd.REP_ERR_TLS_REQD : Nbd.REP_ERR_UNSUP, ByteBuffer.allocate(0));
            }
        }
    }

    private void transmission(Stream s, Cuttable raw) throws IOException {
        while (true) {
            Request r;
            try {
                r = Request.decode(s.read(Nbd.REQUEST_SIZE));
            } catch (io.jnbd.protocol.ProtocolException e) {
                return;
            }
            switch (r.type()) {
                case Nbd.CMD_DISC -> { return; }
                case Nbd.CMD_READ -> {
                    ByteBuffer reply = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE + (int) r.length());
                    SimpleReply.encode(reply, 0, r.cookie());
                    reply.put(disk, (int) r.offset(), (int) r.length()).flip();
                    if (mode == Mode.STALL_MID_RECORD) raw.cutNextWrite = true;
                    s.write(reply);
                }
                case Nbd.CMD_WRITE -> {
                    s.read((int) r.length()).get(disk, (int) r.offset(), (int) r.length());
                    simple(s, r.cookie());
                }
                default -> simple(s, r.cookie());
            }
        }
    }

    private static OptionHeader decodeOption(ByteBuffer b) {
        try {
            return OptionHeader.decode(b);
        } catch (io.jnbd.protocol.ProtocolException e) {
            return null;
        }
    }

    private static void simple(Stream s, long cookie) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE);
        SimpleReply.encode(b, 0, cookie);
        s.write(b.flip());
    }

    private static void optionReply(Stream s, int option, int type, ByteBuffer data) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(Nbd.OPTION_REPLY_HEADER_SIZE + data.remaining());
        OptionReplyHeader.encode(b, option, type, data.remaining());
        s.write(b.put(data).flip());
    }

    private void awaitClose(SocketChannel ch) {
        try {
            while (ch.isOpen() && listener.isOpen() && ch.read(ByteBuffer.allocate(1)) >= 0) {
                // Drain whatever the client sends (its TLS ClientHello) and never answer.
            }
        } catch (IOException ignored) {
            // Closed: done.
        }
    }

    /** The socket as TLS's raw channel; it can be told to send only half of its next write and then hang. */
    private final class Cuttable implements RawChannel {
        private final SocketChannel ch;
        volatile boolean cutNextWrite;

        Cuttable(SocketChannel ch) {
            this.ch = ch;
        }

        @Override
        public int read(ByteBuffer dst) throws IOException {
            return ch.read(dst);
        }

        @Override
        public void write(ByteBuffer src) throws IOException {
            if (cutNextWrite) {
                ByteBuffer half = src.slice(src.position(), Math.max(1, src.remaining() / 2));
                while (half.hasRemaining()) ch.write(half);
                stalled.countDown();
                awaitClose(ch);
                throw new EOFException("stalled on purpose until the client closed");
            }
            while (src.hasRemaining()) ch.write(src);
        }
    }

    /** Plain until STARTTLS, then the TLS session. */
    private record Stream(RawChannel raw, SecureChannel secure) {
        ByteBuffer read(int n) throws IOException {
            ByteBuffer b = ByteBuffer.allocate(n);
            while (b.hasRemaining()) {
                if ((secure != null ? secure.read(b) : raw.read(b)) < 0) throw new EOFException();
            }
            return b.flip();
        }

        void write(ByteBuffer b) throws IOException {
            if (secure != null) secure.write(b);
            else raw.write(b);
        }
    }

    @Override
    public void close() throws IOException {
        listener.close();
        SocketChannel c = current;
        if (c != null) c.close();
        try {
            thread.join(2000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
