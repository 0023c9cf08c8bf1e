package io.jnbd.interop;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/**
 * The smallest NBD client that can write and read back: fixed newstyle handshake, NBD_OPT_GO, simple replies.
 * Written from the specification (doc/proto.md) on purpose, independent of jnbd's own protocol code,
 * so that it checks the server against the spec rather than against itself.
 */
final class RawNbdClient implements AutoCloseable {

    static final long NBDMAGIC = 0x4e42444d41474943L;
    static final long IHAVEOPT = 0x49484156454F5054L;
    static final long OPTION_REPLY_MAGIC = 0x3e889045565a9L;
    static final int REQUEST_MAGIC = 0x25609513;
    static final int SIMPLE_REPLY_MAGIC = 0x67446698;
    static final int FLAG_FIXED_NEWSTYLE = 1;
    static final int FLAG_NO_ZEROES = 2;
    static final int OPT_GO = 7;
    static final int REP_ACK = 1;
    static final int REP_INFO = 3;
    static final int REP_ERR_POLICY = 0x80000002;
    static final int REP_ERR_UNKNOWN = 0x80000006;
    static final int INFO_EXPORT = 0;
    static final int FLAG_CAN_MULTI_CONN = 1 << 8;
    static final short CMD_READ = 0;
    static final short CMD_WRITE = 1;
    static final short CMD_DISC = 2;
    static final short CMD_FLUSH = 3;

    private final Socket socket;
    final DataInputStream in;
    final DataOutputStream out;
    long exportSize = -1;
    /** The transmission flags of NBD_INFO_EXPORT (NBD_FLAG_*), -1 until the server sent them. */
    int transmissionFlags = -1;

    private RawNbdClient(Socket socket) throws IOException {
        this.socket = socket;
        this.in = new DataInputStream(new BufferedInputStream(socket.getInputStream()));
        this.out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream(), 1 << 16));
    }

    /** Connects without a handshake: the server waits for our client flags. */
    static RawNbdClient connectOnly(int port) throws IOException {
        Socket socket = new Socket();
        socket.connect(new InetSocketAddress("127.0.0.1", port), 5000);
        socket.setSoTimeout(30_000);
        return new RawNbdClient(socket);
    }

    /** Connects and enters the transmission phase on the named export with NBD_OPT_GO. */
    static RawNbdClient open(int port, String export) throws IOException {
        RawNbdClient client = connectOnly(port);
        client.handshake(export);
        return client;
    }

    private void handshake(String export) throws IOException {
        greet();
        go(export);
    }

    /** Reads the server's greeting and answers with our client flags: option haggling may begin. */
    void greet() throws IOException {
        expect(in.readLong() == NBDMAGIC, "NBDMAGIC");
        expect(in.readLong() == IHAVEOPT, "IHAVEOPT");
        int serverFlags = in.readUnsignedShort();
        expect((serverFlags & FLAG_FIXED_NEWSTYLE) != 0, "fixed newstyle");
        out.writeInt(FLAG_FIXED_NEWSTYLE | (serverFlags & FLAG_NO_ZEROES));
        out.flush();
    }

    /**
     * NBD_OPT_GO on the named export: on success the connection is in the transmission phase; a refusal is
     * thrown as {@link Refused}, and the connection stays in option haggling, ready for another option.
     */
    void go(String export) throws IOException {
        byte[] name = export.getBytes(StandardCharsets.UTF_8);
        out.writeLong(IHAVEOPT);
        out.writeInt(OPT_GO);
        out.writeInt(4 + name.length + 2);
        out.writeInt(name.length);
        out.write(name);
        out.writeShort(0); // no information requests: NBD_INFO_EXPORT comes anyway
        out.flush();
        while (true) {
            expect(in.readLong() == OPTION_REPLY_MAGIC, "option reply magic");
            expect(in.readInt() == OPT_GO, "reply to NBD_OPT_GO");
            int type = in.readInt();
            int length = in.readInt();
            byte[] data = new byte[length];
            in.readFully(data);
            if (type == REP_ACK) break;
            if (type < 0) throw new Refused(type, new String(data, StandardCharsets.UTF_8));
            if (type == REP_INFO && length >= 12 && ((data[0] << 8) | (data[1] & 0xff)) == INFO_EXPORT) {
                exportSize = java.nio.ByteBuffer.wrap(data, 2, 8).getLong();
                transmissionFlags = java.nio.ByteBuffer.wrap(data, 10, 2).getShort() & 0xffff;
            }
        }
    }

    /** The server's error reply to NBD_OPT_GO: its type (NBD_REP_ERR_*) and the message it sent. */
    static final class Refused extends IOException {
        final int type;
        final String text;

        Refused(int type, String text) {
            super("NBD_OPT_GO refused: reply type 0x" + Integer.toHexString(type) + " " + text);
            this.type = type;
            this.text = text;
        }
    }

    /** Sends a request (with its payload, if any) without waiting for the reply. */
    void send(short type, long cookie, long offset, int length, byte[] payload) throws IOException {
        out.writeInt(REQUEST_MAGIC);
        out.writeShort(0);
        out.writeShort(type);
        out.writeLong(cookie);
        out.writeLong(offset);
        out.writeInt(length);
        if (payload != null) out.write(payload, 0, length);
        out.flush();
    }

    /** A simple reply: cookie and error (0 = success). */
    record Reply(long cookie, int error) {}

    Reply readReply() throws IOException {
        int magic = in.readInt();
        expect(magic == SIMPLE_REPLY_MAGIC, "simple reply magic, got 0x" + Integer.toHexString(magic));
        int error = in.readInt();
        long cookie = in.readLong();
        return new Reply(cookie, error);
    }

    /** Writes and waits for the acknowledgement; returns the NBD error (0 = success). */
    int write(long offset, byte[] data) throws IOException {
        send(CMD_WRITE, offset, offset, data.length, data);
        Reply reply = readReply();
        expect(reply.cookie() == offset, "cookie echoed");
        return reply.error();
    }

    /** True if the server closes the connection (EOF or reset) without sending anything more; false if it sends a byte. */
    boolean closedByPeer() throws IOException {
        try {
            return in.read() < 0;
        } catch (java.net.SocketException e) {
            return true; // connection reset
        }
    }

    /** Reads and waits for the data; an NBD error becomes an IOException naming it. */
    byte[] read(long offset, int length) throws IOException {
        send(CMD_READ, offset, offset, length, null);
        Reply reply = readReply();
        expect(reply.cookie() == offset, "cookie echoed");
        if (reply.error() != 0) {
            throw new IOException("NBD_CMD_READ of " + length + " bytes at " + offset + ": error " + reply.error());
        }
        byte[] data = new byte[length];
        in.readFully(data);
        return data;
    }

    private static void expect(boolean condition, String what) throws IOException {
        if (!condition) throw new IOException("protocol violation by the server: expected " + what);
    }

    /** How long a read may wait for the server before it fails with SocketTimeoutException (30 s unless set). */
    void readTimeout(java.time.Duration timeout) throws IOException {
        socket.setSoTimeout((int) timeout.toMillis());
    }

    /** Sends NBD_CMD_DISC and closes: the polite way out of the transmission phase. */
    void disconnect() throws IOException {
        try {
            send(CMD_DISC, 0, 0, 0, null);
        } finally {
            close();
        }
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
