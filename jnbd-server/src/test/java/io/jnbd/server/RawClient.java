package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Chunks;
import io.jnbd.protocol.ExportRequest;
import io.jnbd.protocol.Info;
import io.jnbd.protocol.MetaContextRequest;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.OptionHeader;
import io.jnbd.protocol.OptionReplyHeader;
import io.jnbd.protocol.ProtocolException;
import io.jnbd.protocol.Request;
import io.jnbd.protocol.SimpleReply;
import io.jnbd.protocol.StructuredReplyHeader;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.net.SocketAddress;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;

/**
 * A test client that speaks the NBD protocol byte by byte, with the protocol module's codecs, so that tests
 * can send anything — including what no real client would — and see exactly what the server answers.
 * Every read has a timeout, so a server that fails to answer fails the test instead of hanging it. Public, in the
 * test jar, for tests elsewhere that must send what jnbd's own client refuses to (a write to a read-only export).
 */
public final class RawClient implements AutoCloseable {
    static final int READ_TIMEOUT_MS = 20_000;

    final SocketChannel channel;
    private InputStream in;
    /** Where writes go once {@link #upgrade} swapped the streams (TLS after STARTTLS); null: the channel. */
    private java.io.OutputStream out;

    /** What the handshake agreed, once {@link #go} or {@link #exportName} has run. */
    long size;
    public int transmissionFlags;
    boolean structured;
    int handshakeFlags;
    final List<Info> infos = new ArrayList<>();

    private RawClient(SocketChannel channel) throws IOException {
        this.channel = channel;
        InputStream stream;
        try {
            channel.socket().setSoTimeout(READ_TIMEOUT_MS);
            stream = channel.socket().getInputStream();
        } catch (UnsupportedOperationException e) {
            // Unix sockets have no socket adaptor, so no read timeout: the tests' @Timeout guards against hangs.
            stream = java.nio.channels.Channels.newInputStream(channel);
        }
        this.in = stream;
    }

    static RawClient connect(SocketAddress address) throws IOException {
        return new RawClient(SocketChannel.open(address));
    }

    /** A client on a channel the caller has already connected (in blocking mode). */
    static RawClient over(SocketChannel channel) throws IOException {
        return new RawClient(channel);
    }

    /** Connects, then negotiates up to transmission on {@code export} with GO, asking for the block sizes. */
    public static RawClient open(SocketAddress address, String export, boolean structured, boolean baseAllocation) throws IOException {
        return open(address, export, structured, baseAllocation, List.of(Nbd.INFO_BLOCK_SIZE));
    }

    /**
     * As {@link #open(SocketAddress, String, boolean, boolean)}, with GO carrying {@code infoRequests}. Without
     * {@link Nbd#INFO_BLOCK_SIZE} among them the client has not agreed to the server's block size constraints,
     * and the spec lets it send requests of any alignment.
     */
    static RawClient open(SocketAddress address, String export, boolean structured, boolean baseAllocation,
                          List<Integer> infoRequests) throws IOException {
        RawClient c = connect(address);
        try {
            c.negotiate(export, structured, baseAllocation, infoRequests);
            return c;
        } catch (IOException | RuntimeException | Error e) {
            c.close();
            throw e;
        }
    }

    /** Runs the handshake from the greeting to transmission on {@code export}; the caller closes on failure. */
    void negotiate(String export, boolean structured, boolean baseAllocation, List<Integer> infoRequests) throws IOException {
        greeting();
        clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        negotiateAfterGreeting(export, structured, baseAllocation, infoRequests);
    }

    /** As {@link #negotiate}, from option haggling on (e.g. once STARTTLS is done), asking for the block sizes. */
    void negotiateAfterGreeting(String export, boolean structured) throws IOException {
        negotiateAfterGreeting(export, structured, false, List.of(Nbd.INFO_BLOCK_SIZE));
    }

    void negotiateAfterGreeting(String export, boolean structured, boolean baseAllocation, List<Integer> infoRequests)
            throws IOException {
        if (structured) {
            assertThat(option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            this.structured = true;
        }
        if (baseAllocation) {
            List<OptionReply> replies = optionUntilFinal(Nbd.OPT_SET_META_CONTEXT,
                metaContext(export, List.of(Nbd.CONTEXT_BASE_ALLOCATION)));
            assertThat(replies).extracting(OptionReply::type).containsExactly(Nbd.REP_META_CONTEXT, Nbd.REP_ACK);
        }
        List<OptionReply> go = optionUntilFinal(Nbd.OPT_GO, exportRequest(export, infoRequests));
        assertThat(go.getLast().type()).as("GO reply").isEqualTo(Nbd.REP_ACK);
        takeInfos(go);
    }

    static RawClient open(SocketAddress address, String export) throws IOException {
        return open(address, export, false, false);
    }

    void takeInfos(List<OptionReply> replies) {
        for (OptionReply r : replies) {
            if (r.type() != Nbd.REP_INFO) continue;
            Info info = r.info();
            infos.add(info);
            if (info instanceof Info.Export e) {
                size = e.size();
                transmissionFlags = e.transmissionFlags();
            }
        }
    }

    Info.BlockSize blockSize() {
        return infos.stream().filter(i -> i instanceof Info.BlockSize).map(i -> (Info.BlockSize) i).findFirst().orElseThrow();
    }

    // ---------------------------------------------------------------- handshake

    /** Reads the server's greeting and returns its handshake flags. */
    int greeting() throws IOException {
        ByteBuffer b = readBytes(18);
        assertThat(b.getLong()).as("NBDMAGIC").isEqualTo(Nbd.NBDMAGIC);
        assertThat(b.getLong()).as("IHAVEOPT").isEqualTo(Nbd.IHAVEOPT);
        handshakeFlags = Short.toUnsignedInt(b.getShort());
        return handshakeFlags;
    }

    void clientFlags(int flags) throws IOException {
        write(ByteBuffer.allocate(4).putInt(flags).flip());
    }

    void sendOption(int option, byte[] data) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(Nbd.OPTION_HEADER_SIZE + data.length);
        OptionHeader.encode(b, option, data.length);
        write(b.put(data).flip());
    }

    void sendOption(int option, ByteBuffer data) throws IOException {
        byte[] bytes = new byte[data.remaining()];
        data.get(bytes);
        sendOption(option, bytes);
    }

    /** A reply to an option: its header fields and its data. */
    record OptionReply(int option, int type, ByteBuffer data) {
        Info info() {
            try {
                return Info.decode(data.duplicate());
            } catch (ProtocolException e) {
                throw new AssertionError("server sent a malformed NBD_REP_INFO", e);
            }
        }

        String string() {
            byte[] b = new byte[data.remaining()];
            data.duplicate().get(b);
            return new String(b, java.nio.charset.StandardCharsets.UTF_8);
        }

        boolean isError() {
            return (type & Nbd.REP_FLAG_ERROR) != 0;
        }
    }

    OptionReply readOptionReply() throws IOException {
        try {
            OptionReplyHeader h = OptionReplyHeader.decode(readBytes(Nbd.OPTION_REPLY_HEADER_SIZE));
            assertThat(h.length()).as("option reply length").isLessThan(1 << 20);
            return new OptionReply(h.option(), h.type(), readBytes((int) h.length()));
        } catch (ProtocolException e) {
            throw new AssertionError(e);
        }
    }

    /** Sends an option and reads one reply. */
    OptionReply option(int option, byte[] data) throws IOException {
        sendOption(option, data);
        OptionReply r = readOptionReply();
        assertThat(r.option()).as("reply names the option").isEqualTo(option);
        return r;
    }

    /** Sends an option and reads replies up to the final one (ACK or an error). */
    List<OptionReply> optionUntilFinal(int option, byte[] data) throws IOException {
        sendOption(option, data);
        List<OptionReply> out = new ArrayList<>();
        while (true) {
            OptionReply r = readOptionReply();
            assertThat(r.option()).as("reply names the option").isEqualTo(option);
            out.add(r);
            if (r.type() == Nbd.REP_ACK || r.isError()) return out;
        }
    }

    static byte[] exportRequest(String name, List<Integer> infos) {
        ExportRequest r = new ExportRequest(name, infos);
        ByteBuffer b = ByteBuffer.allocate(r.encodedLength());
        r.encode(b);
        return b.array();
    }

    static byte[] metaContext(String export, List<String> queries) {
        MetaContextRequest r = new MetaContextRequest(export, queries);
        ByteBuffer b = ByteBuffer.allocate(r.encodedLength());
        r.encode(b);
        return b.array();
    }

    // ---------------------------------------------------------------- transmission

    void send(Request r) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE);
        r.encode(b);
        write(b.flip());
    }

    void send(Request r, byte[] payload) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE + payload.length);
        r.encode(b);
        write(b.put(payload).flip());
    }

    /** A simple reply: error, cookie, and for a successful read the data. */
    record Simple(int error, long cookie, byte[] data) {}

    /** Reads a simple reply; {@code dataLength} bytes of data follow it if the error is 0. */
    Simple readSimple(int dataLength) throws IOException {
        ByteBuffer b = readBytes(Nbd.SIMPLE_REPLY_SIZE);
        assertThat(b.getInt()).as("simple reply magic").isEqualTo(Nbd.SIMPLE_REPLY_MAGIC);
        SimpleReply r = SimpleReply.decodeAfterMagic(b);
        byte[] data = new byte[0];
        if (r.error() == 0 && dataLength > 0) {
            data = new byte[dataLength];
            readBytes(data);
        }
        return new Simple(r.error(), r.cookie(), data);
    }

    /** One structured reply chunk with its payload. */
    record Chunk(int flags, int type, long cookie, ByteBuffer payload) {
        boolean done() { return (flags & Nbd.REPLY_FLAG_DONE) != 0; }

        Chunks.ErrorPayload error() {
            try {
                return Chunks.decodeError(type, payload.duplicate());
            } catch (ProtocolException e) {
                throw new AssertionError("malformed error chunk", e);
            }
        }

        Chunks.BlockStatusPayload blockStatus() {
            try {
                return Chunks.decodeBlockStatus(payload.duplicate());
            } catch (ProtocolException e) {
                throw new AssertionError("malformed block status chunk", e);
            }
        }

        long offset() { return payload.getLong(0); }

        byte[] data() {
            byte[] b = new byte[payload.remaining() - 8];
            payload.get(8, b);
            return b;
        }
    }

    Chunk readChunk() throws IOException {
        ByteBuffer b = readBytes(Nbd.STRUCTURED_REPLY_SIZE);
        int magic = b.getInt();
        assertThat(magic).as("structured reply magic").isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        StructuredReplyHeader h = StructuredReplyHeader.decodeAfterMagic(b);
        assertThat(h.length()).as("chunk length").isLessThanOrEqualTo((1L << 25) + 8);
        return new Chunk(h.flags(), h.type(), h.cookie(), readBytes((int) h.length()));
    }

    /**
     * Reads one reply's first piece: a simple reply header (returned as a chunk of type -1, with any read data
     * of the structured kind read off too), or one whole structured reply up to DONE (returned as its first
     * chunk). For tests that only need to see which cookies were answered.
     */
    Chunk readChunkOrSimple() throws IOException {
        ByteBuffer m = readBytes(4);
        int magic = m.getInt();
        if (magic == Nbd.SIMPLE_REPLY_MAGIC) {
            SimpleReply r = SimpleReply.decodeAfterMagic(readBytes(12));
            return new Chunk(Nbd.REPLY_FLAG_DONE, -1, r.cookie(), ByteBuffer.allocate(0));
        }
        assertThat(magic).isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        StructuredReplyHeader h = StructuredReplyHeader.decodeAfterMagic(readBytes(16));
        Chunk first = new Chunk(h.flags(), h.type(), h.cookie(), readBytes((int) h.length()));
        Chunk c = first;
        while (!c.done()) c = readChunk();
        return first;
    }

    /** Reads chunks of one reply up to and including the one flagged DONE. */
    List<Chunk> readStructured() throws IOException {
        List<Chunk> out = new ArrayList<>();
        while (true) {
            Chunk c = readChunk();
            if (!out.isEmpty()) assertThat(c.cookie()).as("chunks of one reply").isEqualTo(out.getFirst().cookie());
            out.add(c);
            if (c.done()) return out;
        }
    }

    /**
     * Reads a structured read reply for {@code [offset, offset + length)} and assembles the data, checking
     * that the chunks cover the range exactly once and that exactly the last chunk has DONE.
     */
    byte[] readStructuredData(long cookie, long offset, int length) throws IOException {
        List<Chunk> chunks = readStructured();
        return assemble(chunks, cookie, offset, length);
    }

    static byte[] assemble(List<Chunk> chunks, long cookie, long offset, int length) {
        byte[] out = new byte[length];
        boolean[] covered = new boolean[length];
        for (Chunk c : chunks) {
            assertThat(c.cookie()).isEqualTo(cookie);
            switch (c.type()) {
                case Nbd.REPLY_TYPE_OFFSET_DATA -> {
                    byte[] d = c.data();
                    assertThat(d).as("OFFSET_DATA carries data").isNotEmpty();
                    int at = (int) (c.offset() - offset);
                    assertThat(at).isBetween(0, length - d.length);
                    for (int i = 0; i < d.length; i++) {
                        assertThat(covered[at + i]).as("byte %d sent twice", at + i).isFalse();
                        covered[at + i] = true;
                    }
                    System.arraycopy(d, 0, out, at, d.length);
                }
                case Nbd.REPLY_TYPE_OFFSET_HOLE -> {
                    int at = (int) (c.offset() - offset);
                    int n = c.payload().getInt(8);
                    assertThat(at).isBetween(0, length - n);
                    for (int i = 0; i < n; i++) covered[at + i] = true;
                }
                case Nbd.REPLY_TYPE_NONE -> assertThat(length).isZero();
                default -> throw new AssertionError("unexpected chunk type " + c.type() + " in a read reply"
                    + (c.type() >= 0x8000 ? ": " + c.error() : ""));
            }
        }
        for (int i = 0; i < length; i++) assertThat(covered[i]).as("byte %d covered", i).isTrue();
        return out;
    }

    /** The outcome of a request that returns no data: its error (0 for success) and cookie. */
    record Reply(int error, long cookie, List<Chunk> chunks) {}

    /**
     * Reads the reply to a request that returns no data (anything but a successful READ), whether the server
     * sent it simple or structured (the spec lets a server answer such requests either way once structured
     * replies are negotiated).
     */
    Reply readReply() throws IOException {
        ByteBuffer m = readBytes(4);
        int magic = m.getInt();
        if (magic == Nbd.SIMPLE_REPLY_MAGIC) {
            SimpleReply r = SimpleReply.decodeAfterMagic(readBytes(12));
            return new Reply(r.error(), r.cookie(), List.of());
        }
        assertThat(magic).as("reply magic").isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        assertThat(structured).as("structured reply without negotiation").isTrue();
        List<Chunk> chunks = new ArrayList<>();
        ByteBuffer rest = readBytes(Nbd.STRUCTURED_REPLY_SIZE - 4);
        while (true) {
            StructuredReplyHeader h = StructuredReplyHeader.decodeAfterMagic(rest);
            Chunk c = new Chunk(h.flags(), h.type(), h.cookie(), readBytes((int) h.length()));
            chunks.add(c);
            if (c.done()) break;
            rest = readBytes(Nbd.STRUCTURED_REPLY_SIZE);
            assertThat(rest.getInt()).isEqualTo(Nbd.STRUCTURED_REPLY_MAGIC);
        }
        int error = 0;
        for (Chunk c : chunks) {
            assertThat(c.cookie()).isEqualTo(chunks.getFirst().cookie());
            if (c.type() >= 0x8000 && error == 0) {
                error = c.error().error();
                assertThat(error).as("error chunk with error 0").isNotZero();
            }
        }
        return new Reply(error, chunks.getFirst().cookie(), List.copyOf(chunks));
    }

    /** Sends a request (with its payload, if any) and returns the error of its reply, checking the cookie. */
    int call(Request r, byte[] payload) throws IOException {
        if (payload != null) send(r, payload);
        else send(r);
        Reply reply = readReply();
        assertThat(reply.cookie()).as("cookie of the reply to %s", r).isEqualTo(r.cookie());
        return reply.error();
    }

    int call(Request r) throws IOException {
        return call(r, null);
    }

    private long nextCookie = 1;

    long cookie() {
        return nextCookie++;
    }

    /** Reads {@code length} bytes at {@code offset}, simple or structured, failing on any error. */
    public byte[] read(long offset, int length) throws IOException {
        long cookie = cookie();
        send(new Request(0, Nbd.CMD_READ, cookie, offset, length));
        if (structured) return readStructuredData(cookie, offset, length);
        Simple s = readSimple(length);
        assertThat(s.error()).as("read error").isZero();
        assertThat(s.cookie()).isEqualTo(cookie);
        return s.data();
    }

    /** Sends a read expected to fail and returns its error. */
    public int readError(int flags, long offset, long length) throws IOException {
        long cookie = cookie();
        send(new Request(flags, Nbd.CMD_READ, cookie, offset, length));
        Reply r = readReply();
        assertThat(r.cookie()).isEqualTo(cookie);
        assertThat(r.error()).as("read at %d+%d was expected to fail", offset, length).isNotZero();
        return r.error();
    }

    public int write(long offset, byte[] data, int flags) throws IOException {
        return call(new Request(flags, Nbd.CMD_WRITE, cookie(), offset, data.length), data);
    }

    public int command(int type, int flags, long offset, long length) throws IOException {
        return call(new Request(flags, type, cookie(), offset, length));
    }

    /** Sends DISC and waits for the server to close the connection. */
    void disconnect() throws IOException {
        send(new Request(0, Nbd.CMD_DISC, 0, 0, 0));
        assertThat(closedByPeer()).isTrue();
    }

    // ---------------------------------------------------------------- raw bytes

    /** The stream the client reads from now: the socket's, or TLS over it after {@link #upgrade}. */
    InputStream input() {
        return in;
    }

    /** From now on every byte goes through these streams, e.g. a TLS session over the socket after STARTTLS. */
    void upgrade(InputStream in, java.io.OutputStream out) {
        this.in = in;
        this.out = out;
    }

    void write(ByteBuffer b) throws IOException {
        if (out != null) {
            byte[] bytes = new byte[b.remaining()];
            b.get(bytes);
            out.write(bytes);
            out.flush();
            return;
        }
        while (b.hasRemaining()) channel.write(b);
    }

    void write(byte[] b) throws IOException {
        write(ByteBuffer.wrap(b));
    }

    ByteBuffer readBytes(int n) throws IOException {
        byte[] b = new byte[n];
        readBytes(b);
        return ByteBuffer.wrap(b);
    }

    void readBytes(byte[] b) throws IOException {
        int off = 0;
        while (off < b.length) {
            int n = in.read(b, off, b.length - off);
            if (n < 0) throw new EOFException("server closed the connection after " + off + " of " + b.length + " bytes");
            off += n;
        }
    }

    /**
     * True if the server closes the connection (EOF or reset) without sending anything more; false if it
     * sends a byte instead. A server that does neither within the read timeout fails the test.
     */
    boolean closedByPeer() throws IOException {
        try {
            int n = in.read();
            return n < 0;
        } catch (SocketTimeoutException e) {
            throw new AssertionError("server neither answered nor closed the connection within " + READ_TIMEOUT_MS + " ms");
        } catch (SocketException e) {
            return true; // connection reset
        }
    }

    /** Reads and discards whatever arrives until the server closes; true if it closed in time. */
    boolean drainUntilClosed() throws IOException {
        byte[] sink = new byte[65536];
        try {
            while (in.read(sink) >= 0) { /* discard */ }
            return true;
        } catch (SocketTimeoutException e) {
            return false;
        } catch (SocketException e) {
            return true;
        }
    }

    @Override
    public void close() throws IOException {
        channel.close();
    }
}
