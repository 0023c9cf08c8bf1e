package io.jnbd.pool;

import io.jnbd.protocol.Nbd;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * A plain-text connection that stays in the handshake and sends options as a guesser would: many
 * {@code NBD_OPT_GO}s on one connection, each answered by a final reply, and {@code NBD_OPT_LIST}.
 */
final class RawOptions implements AutoCloseable {
    private final Socket socket;
    private final DataInputStream in;
    private final DataOutputStream out;

    RawOptions(InetSocketAddress address) throws IOException {
        socket = new Socket(address.getAddress(), address.getPort());
        socket.setSoTimeout(10_000);
        socket.setTcpNoDelay(true);
        in = new DataInputStream(new java.io.BufferedInputStream(socket.getInputStream()));
        out = new DataOutputStream(new java.io.BufferedOutputStream(socket.getOutputStream()));
        if (in.readLong() != Nbd.NBDMAGIC || in.readLong() != Nbd.IHAVEOPT) throw new IOException("not an NBD server");
        in.readUnsignedShort();
        out.writeInt(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        out.flush();
    }

    /** Sends {@code NBD_OPT_GO} for {@code name}; returns the final reply's type, having read everything before it. */
    int go(String name) throws IOException {
        byte[] n = name.getBytes(StandardCharsets.UTF_8);
        out.writeLong(Nbd.IHAVEOPT);
        out.writeInt(Nbd.OPT_GO);
        out.writeInt(4 + n.length + 2);
        out.writeInt(n.length);
        out.write(n);
        out.writeShort(0);
        out.flush();
        while (true) {
            int type = reply(Nbd.OPT_GO, null);
            if (type != Nbd.REP_INFO) return type;
        }
    }

    /** The names {@code NBD_OPT_LIST} gives, each with its description. */
    List<String> list() throws IOException {
        out.writeLong(Nbd.IHAVEOPT);
        out.writeInt(Nbd.OPT_LIST);
        out.writeInt(0);
        out.flush();
        List<String> entries = new ArrayList<>();
        while (reply(Nbd.OPT_LIST, entries) == Nbd.REP_SERVER) {
            // one entry each
        }
        return entries;
    }

    private int reply(int option, List<String> entries) throws IOException {
        if (in.readLong() != Nbd.OPTION_REPLY_MAGIC) throw new IOException("no option reply magic");
        if (in.readInt() != option) throw new IOException("a reply to another option");
        int type = in.readInt();
        byte[] data = in.readNBytes(in.readInt());
        if (entries != null && type == Nbd.REP_SERVER) entries.add(new String(data, 4, data.length - 4, StandardCharsets.UTF_8));
        return type;
    }

    /** Whether the server ended the connection (EOF or reset) rather than wait for more. */
    boolean closedByServer() throws IOException {
        try {
            InputStream s = socket.getInputStream();
            return s.read() < 0;
        } catch (java.net.SocketException e) {
            return true;
        }
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
