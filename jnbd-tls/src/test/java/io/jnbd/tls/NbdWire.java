package io.jnbd.tls;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Just enough of the NBD fixed newstyle handshake, written by hand, to reach STARTTLS with a real server and to use
 * the export over TLS afterwards (names as in the NBD spec, doc/proto.md).
 */
final class NbdWire {
    static final long NBDMAGIC = 0x4e42444d41474943L;
    static final long IHAVEOPT = 0x49484156454F5054L;
    static final long REPLY_MAGIC = 0x3e889045565a9L;
    static final int NBD_OPT_LIST = 3;
    static final int NBD_OPT_STARTTLS = 5;
    static final int NBD_OPT_GO = 7;
    static final int NBD_REP_ACK = 1;
    static final int NBD_REP_SERVER = 2;
    static final int NBD_REP_INFO = 3;
    static final int NBD_REP_ERR_TLS_REQD = (1 << 31) + 5;
    static final short NBD_INFO_EXPORT = 0;
    static final int NBD_FLAG_C_FIXED_NEWSTYLE = 1;
    static final int NBD_FLAG_C_NO_ZEROES = 2;
    static final int NBD_REQUEST_MAGIC = 0x25609513;
    static final int NBD_SIMPLE_REPLY_MAGIC = 0x67446698;
    static final short NBD_CMD_READ = 0;
    static final short NBD_CMD_WRITE = 1;
    static final short NBD_CMD_DISC = 2;

    /** Both sides of the handshake: before STARTTLS the socket, after it the TLS session. */
    interface Stream {
        void write(ByteBuffer b) throws IOException;

        int read(ByteBuffer b) throws IOException;

        default void readFully(ByteBuffer b) throws IOException {
            while (b.hasRemaining()) {
                if (read(b) < 0) throw new EOFException("the server closed the connection");
            }
        }

        static Stream of(SocketChannel s) {
            return new Stream() {
                @Override public void write(ByteBuffer b) throws IOException { while (b.hasRemaining()) s.write(b); }
                @Override public int read(ByteBuffer b) throws IOException { return s.read(b); }
            };
        }

        static Stream of(SecureChannel c) {
            return new Stream() {
                @Override public void write(ByteBuffer b) throws IOException { c.write(b); }
                @Override public int read(ByteBuffer b) throws IOException { return c.read(b); }
            };
        }
    }

    record OptionReply(int option, int type, ByteBuffer data) {}

    private NbdWire() {}

    /** Reads the greeting and answers it with the fixed newstyle client flags. */
    static void greet(Stream s) throws IOException {
        ByteBuffer greeting = ByteBuffer.allocate(18);
        s.readFully(greeting.clear());
        assertThat(greeting.getLong(0)).isEqualTo(NBDMAGIC);
        assertThat(greeting.getLong(8)).isEqualTo(IHAVEOPT);
        s.write(ByteBuffer.allocate(4).putInt(0, NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES));
    }

    static void sendOption(Stream s, int option, ByteBuffer data) throws IOException {
        ByteBuffer header = ByteBuffer.allocate(16).putLong(IHAVEOPT).putInt(option).putInt(data.remaining()).flip();
        s.write(header);
        s.write(data);
    }

    static OptionReply readReply(Stream s) throws IOException {
        ByteBuffer h = ByteBuffer.allocate(20);
        s.readFully(h);
        assertThat(h.getLong(0)).isEqualTo(REPLY_MAGIC);
        ByteBuffer data = ByteBuffer.allocate(h.getInt(16));
        s.readFully(data);
        return new OptionReply(h.getInt(8), h.getInt(12), data.flip());
    }

    /** Greeting, NBD_OPT_STARTTLS and its ACK: the socket is ready for the ClientHello. */
    static void startTls(SocketChannel socket) throws IOException {
        Stream s = Stream.of(socket);
        greet(s);
        sendOption(s, NBD_OPT_STARTTLS, ByteBuffer.allocate(0));
        OptionReply r = readReply(s);
        assertThat(r.option()).isEqualTo(NBD_OPT_STARTTLS);
        assertThat(r.type()).as("STARTTLS acknowledged").isEqualTo(NBD_REP_ACK);
    }

    /** NBD_OPT_GO for the default export ""; the export's size from NBD_INFO_EXPORT. */
    static long go(Stream s) throws IOException {
        ByteBuffer data = ByteBuffer.allocate(6).putInt(0).putShort((short) 0).flip();
        sendOption(s, NBD_OPT_GO, data);
        long size = -1;
        while (true) {
            OptionReply r = readReply(s);
            assertThat(r.option()).isEqualTo(NBD_OPT_GO);
            if (r.type() == NBD_REP_ACK) return size;
            assertThat(r.type()).as("NBD_OPT_GO reply type").isEqualTo(NBD_REP_INFO);
            if (r.data().getShort(0) == NBD_INFO_EXPORT) size = r.data().getLong(2);
        }
    }

    /** Writes {@code data} at {@code offset}, reads it back, and disconnects; the bytes read. */
    static byte[] writeReadDisconnect(Stream s, long offset, byte[] data) throws IOException {
        s.write(request(NBD_CMD_WRITE, 1, offset, data.length));
        s.write(ByteBuffer.wrap(data));
        expectSimpleReply(s, 1);
        s.write(request(NBD_CMD_READ, 2, offset, data.length));
        expectSimpleReply(s, 2);
        ByteBuffer back = ByteBuffer.allocate(data.length);
        s.readFully(back);
        s.write(request(NBD_CMD_DISC, 3, 0, 0));
        return back.array();
    }

    private static ByteBuffer request(short type, long cookie, long offset, int length) {
        return ByteBuffer.allocate(28).putInt(NBD_REQUEST_MAGIC).putShort((short) 0).putShort(type).putLong(cookie)
            .putLong(offset).putInt(length).flip();
    }

    private static void expectSimpleReply(Stream s, long cookie) throws IOException {
        ByteBuffer r = ByteBuffer.allocate(16);
        s.readFully(r);
        assertThat(r.getInt(0)).isEqualTo(NBD_SIMPLE_REPLY_MAGIC);
        assertThat(r.getInt(4)).as("NBD error").isZero();
        assertThat(r.getLong(8)).isEqualTo(cookie);
    }

    static ByteBuffer ascii(String s) {
        return ByteBuffer.wrap(s.getBytes(StandardCharsets.US_ASCII));
    }
}
