package io.jnbd.client;

import io.jnbd.protocol.BlockStatusDescriptor;
import io.jnbd.protocol.Chunks;
import io.jnbd.protocol.Info;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.OptionHeader;
import io.jnbd.protocol.OptionReplyHeader;
import io.jnbd.protocol.Request;
import io.jnbd.protocol.SimpleReply;
import io.jnbd.protocol.Strings;

import java.io.EOFException;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;

/**
 * A deliberately small and scriptable NBD server for client tests: it answers reads with structured reply
 * chunks in reverse offset order, turning all-zero stretches into OFFSET_HOLE chunks, and can misbehave on
 * purpose (see {@link Mode}) to show that the client notices. Single-threaded, one client at a time.
 */
final class FakeNbdServer implements AutoCloseable {

    enum Mode {
        /** Correct replies, chunks in reverse order. */
        REVERSE,
        /** The reply to a read carries a cookie the client never sent. */
        UNKNOWN_COOKIE,
        /** An OFFSET_DATA chunk that starts before the request. */
        CHUNK_OUTSIDE,
        /** Two chunks covering the same bytes. */
        OVERLAP,
        /** DONE before the whole range was covered. */
        SHORT,
        /** The connection is dropped as soon as a read arrives. */
        DROP,
        /** Reads are answered with an EIO error chunk. */
        ERROR,
        /** A reply starts with a bad magic. */
        BAD_MAGIC,
        /** Reads are never answered. */
        SILENT,
        /** Correct replies cut at random points, sent in random order (see {@link #seed}). */
        SHUFFLED,
        /** After the handshake, requests are never even read. */
        STALL,
        /** An old server: GO is unsupported, only EXPORT_NAME works; no structured replies. */
        NO_GO,
        /** After the handshake, requests are not read until {@link #openGate()}; then as REVERSE. */
        GATED,
        /**
         * Each read is answered with one OFFSET_DATA chunk, of which the first half is sent at once and the rest
         * only after {@link #openGate()}: the client's reader is left in the middle of placing data.
         */
        SPLIT_CHUNK,
        /**
         * Reads are held back until a write arrives. A write is answered (with {@link #writeError}) as soon as its
         * header is in, then the held-back reads are, and only then is its payload read: the client reads the
         * write's reply while still sending the payload, and a held-back read's completion shows that it has.
         */
        EARLY_WRITE_REPLY,
        /**
         * A server shutting down: the first request is answered with ESHUTDOWN (a write's payload read and dropped),
         * then the connection is closed, and the mode is REVERSE from then on.
         */
        GOING_AWAY,
        /** The connection is dropped as the first request arrives, unanswered; the mode is REVERSE from then on. */
        DROP_ONCE
    }

    static final int CHUNK = 4096;
    /** The one dirty bitmap this server offers besides base:allocation, at a granularity of {@link #CHUNK}. */
    static final String BITMAP = "qemu:dirty-bitmap:fake";
    private static final int BASE_ID = 7;
    private static final int BITMAP_ID = 8;

    /** Blocks of {@link #CHUNK} bytes that {@link #BITMAP} reports dirty. */
    final java.util.BitSet dirty = new java.util.BitSet();
    /** Block status chunks name a context id the client never got: a broken server. */
    volatile boolean strayContext;
    /** Contexts negotiated on the current connection, by id. */
    private final java.util.Map<Integer, String> negotiated = new java.util.TreeMap<>();

    private final ServerSocketChannel listener;
    private final byte[] disk;
    private final Thread thread;
    private volatile Mode mode;
    /** The error EARLY_WRITE_REPLY answers writes with; 0 for success. */
    volatile int writeError;
    /** Seeds the cuts and order of SHUFFLED replies. */
    volatile long seed;
    private volatile SocketChannel current;
    /** READ requests received, for tests of the client's cache. */
    final java.util.concurrent.atomic.AtomicInteger reads = new java.util.concurrent.atomic.AtomicInteger();
    /** Every request received, in the order it arrived. */
    final List<Request> received = java.util.Collections.synchronizedList(new ArrayList<>());
    private final java.util.concurrent.CountDownLatch gate = new java.util.concurrent.CountDownLatch(1);
    /** Set when SPLIT_CHUNK has sent the first half of a chunk and waits at the gate. */
    final java.util.concurrent.CountDownLatch halfSent = new java.util.concurrent.CountDownLatch(1);

    FakeNbdServer(byte[] disk, Mode mode) throws IOException {
        this.disk = disk;
        this.mode = mode;
        this.listener = ServerSocketChannel.open().bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        this.thread = Thread.ofPlatform().daemon().name("fake-nbd").start(this::acceptLoop);
    }

    URI uri() {
        return URI.create("nbd://127.0.0.1:" + ((InetSocketAddress) listenerAddress()).getPort() + "/fake");
    }

    private java.net.SocketAddress listenerAddress() {
        try {
            return listener.getLocalAddress();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    void mode(Mode mode) {
        this.mode = mode;
    }

    /** Lets GATED and SPLIT_CHUNK go on; they never stop again. */
    void openGate() {
        gate.countDown();
    }

    private void awaitGate(SocketChannel ch) throws IOException {
        try {
            while (!gate.await(20, java.util.concurrent.TimeUnit.MILLISECONDS)) {
                if (!ch.isOpen() || !listener.isOpen()) throw new EOFException("closed while gated");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new EOFException("interrupted while gated");
        }
    }

    /** A deterministic pattern with zeroed stretches, so that both data and hole chunks occur. */
    static byte[] content(int size) {
        byte[] b = new byte[size];
        for (int i = 0; i < size; i++) b[i] = (byte) (i * 31 + 7 + (i >>> 8));
        for (int i = 0; i < size; i += 3 * CHUNK) java.util.Arrays.fill(b, i, Math.min(size, i + CHUNK), (byte) 0);
        return b;
    }

    private void acceptLoop() {
        while (listener.isOpen()) {
            try (SocketChannel ch = listener.accept()) {
                ch.setOption(java.net.StandardSocketOptions.TCP_NODELAY, true);
                current = ch;
                serve(ch);
            } catch (IOException e) {
                // Client went away or the test closed us; wait for the next one.
            }
        }
    }

    private void serve(SocketChannel ch) throws IOException {
        write(ch, ByteBuffer.allocate(18).putLong(Nbd.NBDMAGIC).putLong(Nbd.IHAVEOPT)
            .putShort((short) (Nbd.FLAG_FIXED_NEWSTYLE | Nbd.FLAG_NO_ZEROES)).flip());
        read(ch, 4);
        while (true) {
            ByteBuffer h = read(ch, Nbd.OPTION_HEADER_SIZE);
            OptionHeader oh;
            try {
                oh = OptionHeader.decode(h);
            } catch (io.jnbd.protocol.ProtocolException e) {
                return;
            }
            ByteBuffer optionData = read(ch, (int) oh.length());
            if (mode == Mode.NO_GO && oh.option() != Nbd.OPT_EXPORT_NAME) {
                optionReply(ch, oh.option(), Nbd.REP_ERR_UNSUP, ByteBuffer.allocate(0));
                continue;
            }
            switch (oh.option()) {
                case Nbd.OPT_EXPORT_NAME -> {
                    write(ch, ByteBuffer.allocate(10).putLong(disk.length).putShort((short) Nbd.FLAG_HAS_FLAGS).flip());
                    transmission(ch);
                    return;
                }
                case Nbd.OPT_STRUCTURED_REPLY -> optionReply(ch, oh.option(), Nbd.REP_ACK, ByteBuffer.allocate(0));
                case Nbd.OPT_SET_META_CONTEXT, Nbd.OPT_LIST_META_CONTEXT -> {
                    List<String> queries;
                    try {
                        queries = io.jnbd.protocol.MetaContextRequest.decode(optionData).queries();
                    } catch (io.jnbd.protocol.ProtocolException e) {
                        return;
                    }
                    boolean set = oh.option() == Nbd.OPT_SET_META_CONTEXT;
                    if (set) negotiated.clear();
                    for (var c : java.util.Map.of(BASE_ID, Nbd.CONTEXT_BASE_ALLOCATION, BITMAP_ID, BITMAP).entrySet()) {
                        String n = c.getValue();
                        boolean match = (!set && queries.isEmpty()) || queries.contains(n)
                            || (!set && queries.stream().anyMatch(q -> q.endsWith(":") && n.startsWith(q)));
                        if (!match) continue;
                        if (set) negotiated.put(c.getKey(), n);
                        byte[] name = Strings.utf8(n);
                        optionReply(ch, oh.option(), Nbd.REP_META_CONTEXT,
                            ByteBuffer.allocate(4 + name.length).putInt(set ? c.getKey() : 0).put(name).flip());
                    }
                    optionReply(ch, oh.option(), Nbd.REP_ACK, ByteBuffer.allocate(0));
                }
                case Nbd.OPT_ABORT -> {
                    optionReply(ch, oh.option(), Nbd.REP_ACK, ByteBuffer.allocate(0));
                    return;
                }
                case Nbd.OPT_GO -> {
                    Info info = new Info.Export(disk.length, Nbd.FLAG_HAS_FLAGS | Nbd.FLAG_SEND_FLUSH);
                    ByteBuffer b = ByteBuffer.allocate(info.encodedLength());
                    info.encode(b);
                    optionReply(ch, oh.option(), Nbd.REP_INFO, b.flip());
                    Info bs = new Info.BlockSize(1, 4096, 1 << 20);
                    b = ByteBuffer.allocate(bs.encodedLength());
                    bs.encode(b);
                    optionReply(ch, oh.option(), Nbd.REP_INFO, b.flip());
                    optionReply(ch, oh.option(), Nbd.REP_ACK, ByteBuffer.allocate(0));
                    transmission(ch);
                    return;
                }
                default -> optionReply(ch, oh.option(), Nbd.REP_ERR_UNSUP, ByteBuffer.allocate(0));
            }
        }
    }

    private void transmission(SocketChannel ch) throws IOException {
        if (mode == Mode.STALL) {
            try {
                while (ch.isOpen() && listener.isOpen()) Thread.sleep(20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return;
        }
        if (mode == Mode.GATED) awaitGate(ch);
        List<Request> heldBack = new ArrayList<>();
        while (true) {
            Request r;
            try {
                r = Request.decode(read(ch, Nbd.REQUEST_SIZE));
            } catch (io.jnbd.protocol.ProtocolException e) {
                return;
            }
            received.add(r);
            if (mode == Mode.GOING_AWAY || mode == Mode.DROP_ONCE) {
                boolean answer = mode == Mode.GOING_AWAY;
                mode = Mode.REVERSE;
                if (r.type() == Nbd.CMD_WRITE) read(ch, (int) r.length());
                if (answer) simple(ch, Nbd.ESHUTDOWN, r.cookie());
                return;
            }
            switch (r.type()) {
                case Nbd.CMD_DISC -> { return; }
                case Nbd.CMD_READ -> {
                    reads.incrementAndGet();
                    if (mode == Mode.EARLY_WRITE_REPLY) {
                        heldBack.add(r);
                    } else if (mode == Mode.NO_GO) {
                        simple(ch, 0, r.cookie());
                        write(ch, ByteBuffer.wrap(disk, (int) r.offset(), (int) r.length()));
                    } else if (!answerRead(ch, r)) {
                        return;
                    }
                }
                case Nbd.CMD_WRITE -> {
                    if (mode == Mode.EARLY_WRITE_REPLY) {
                        simple(ch, writeError, r.cookie());
                        for (Request held : heldBack) answerRead(ch, held);
                        heldBack.clear();
                        ByteBuffer data = read(ch, (int) r.length());
                        if (writeError == 0) data.get(disk, (int) r.offset(), (int) r.length());
                        continue;
                    }
                    ByteBuffer data = read(ch, (int) r.length());
                    data.get(disk, (int) r.offset(), (int) r.length());
                    simple(ch, 0, r.cookie());
                }
                case Nbd.CMD_BLOCK_STATUS -> {
                    // One chunk per negotiated context, the bitmap's first; DONE on the last.
                    List<Integer> ids = new ArrayList<>(negotiated.keySet());
                    java.util.Collections.reverse(ids);
                    if (strayContext) ids.addFirst(99);
                    for (int i = 0; i < ids.size(); i++) {
                        int id = ids.get(i);
                        List<BlockStatusDescriptor> list = id == BASE_ID ? allocation(r) : bitmap(r);
                        ByteBuffer b = ByteBuffer.allocate(Chunks.blockStatusSize(list.size()));
                        Chunks.blockStatus(b, i == ids.size() - 1 ? Nbd.REPLY_FLAG_DONE : 0, r.cookie(), id, list);
                        write(ch, b.flip());
                    }
                    if (ids.isEmpty()) simple(ch, Nbd.EINVAL, r.cookie());
                }
                default -> simple(ch, 0, r.cookie());
            }
        }
    }

    private List<BlockStatusDescriptor> allocation(Request r) {
        List<BlockStatusDescriptor> list = new ArrayList<>();
        for (long at = r.offset(); at < r.offset() + r.length(); at += CHUNK) {
            boolean zero = allZero((int) at, (int) Math.min(CHUNK, disk.length - at));
            list.add(new BlockStatusDescriptor(Math.min(CHUNK, disk.length - at), zero ? Nbd.STATE_ZERO | Nbd.STATE_HOLE : 0));
        }
        return list;
    }

    /** The bitmap's runs from the request's block on, merged as qemu merges them, to the end of the request's last block. */
    private List<BlockStatusDescriptor> bitmap(Request r) {
        List<BlockStatusDescriptor> list = new ArrayList<>();
        long end = Math.min(disk.length, (r.offset() + r.length() + CHUNK - 1) / CHUNK * CHUNK);
        for (long at = r.offset(); at < end; ) {
            boolean d = dirty.get((int) (at / CHUNK));
            long next = Math.min(end, (long) (d ? dirty.nextClearBit((int) (at / CHUNK)) : dirty.nextSetBit((int) (at / CHUNK)) < 0
                ? Integer.MAX_VALUE : dirty.nextSetBit((int) (at / CHUNK))) * CHUNK);
            list.add(new BlockStatusDescriptor(next - at, d ? 1 : 0));
            at = next;
        }
        return list;
    }

    /** Returns false when the connection should end. */
    private boolean answerRead(SocketChannel ch, Request r) throws IOException {
        Mode m = mode;
        long cookie = m == Mode.UNKNOWN_COOKIE ? r.cookie() + 1000 : r.cookie();
        switch (m) {
            case DROP -> { return false; }
            case SILENT -> { return true; }
            case BAD_MAGIC -> {
                write(ch, ByteBuffer.allocate(20).putInt(0, 0xdeadbeef));
                return true;
            }
            case ERROR -> {
                ByteBuffer b = ByteBuffer.allocate(Chunks.errorSize("injected"));
                Chunks.error(b, Nbd.REPLY_FLAG_DONE, cookie, Nbd.EIO, "injected");
                write(ch, b.flip());
                return true;
            }
            case CHUNK_OUTSIDE -> {
                sendData(ch, cookie, r.offset() - 1, (int) r.length(), Nbd.REPLY_FLAG_DONE);
                return true;
            }
            case SPLIT_CHUNK -> {
                int n = (int) r.length();
                ByteBuffer b = ByteBuffer.allocate(Chunks.OFFSET_DATA_PREFIX + n);
                Chunks.offsetDataPrefix(b, Nbd.REPLY_FLAG_DONE, cookie, r.offset(), n);
                b.put(disk, (int) r.offset(), n).flip();
                write(ch, b.slice(0, Chunks.OFFSET_DATA_PREFIX + n / 2));
                halfSent.countDown();
                awaitGate(ch);
                write(ch, b.position(Chunks.OFFSET_DATA_PREFIX + n / 2));
                return true;
            }
            default -> { }
        }
        List<long[]> chunks = new ArrayList<>();
        java.util.Random random = new java.util.Random(seed ^ r.offset());
        for (long at = r.offset(); at < r.offset() + r.length(); ) {
            long next = m == Mode.SHUFFLED
                ? Math.min(at + 1 + random.nextInt(3 * CHUNK), r.offset() + r.length())
                : Math.min((at / CHUNK + 1) * CHUNK, r.offset() + r.length());
            chunks.add(new long[]{at, next - at});
            at = next;
        }
        if (m == Mode.SHUFFLED) java.util.Collections.shuffle(chunks, random);
        if (m == Mode.OVERLAP && chunks.size() > 1) chunks.set(0, new long[]{chunks.get(1)[0], chunks.get(1)[1]});
        if (m == Mode.SHORT) chunks.removeLast();
        for (int i = chunks.size() - 1; i >= 0; i--) {
            long at = chunks.get(i)[0];
            int n = (int) chunks.get(i)[1];
            if (allZero((int) at, n)) {
                ByteBuffer b = ByteBuffer.allocate(Chunks.OFFSET_HOLE_SIZE);
                Chunks.offsetHole(b, 0, cookie, at, n);
                write(ch, b.flip());
            } else {
                sendData(ch, cookie, at, n, 0);
            }
        }
        ByteBuffer done = ByteBuffer.allocate(Nbd.STRUCTURED_REPLY_SIZE);
        Chunks.none(done, cookie);
        write(ch, done.flip());
        return true;
    }

    private void sendData(SocketChannel ch, long cookie, long offset, int n, int flags) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(Chunks.OFFSET_DATA_PREFIX + n);
        Chunks.offsetDataPrefix(b, flags, cookie, offset, n);
        int from = (int) Math.max(0, offset);
        b.put(disk, from, Math.min(n, disk.length - from));
        b.position(b.limit());
        write(ch, b.flip());
    }

    private boolean allZero(int from, int n) {
        for (int i = from; i < from + n; i++) if (disk[i] != 0) return false;
        return true;
    }

    private static void simple(SocketChannel ch, int error, long cookie) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE);
        SimpleReply.encode(b, error, cookie);
        write(ch, b.flip());
    }

    private static void optionReply(SocketChannel ch, int option, int type, ByteBuffer data) throws IOException {
        ByteBuffer h = ByteBuffer.allocate(Nbd.OPTION_REPLY_HEADER_SIZE);
        OptionReplyHeader.encode(h, option, type, data.remaining());
        write(ch, h.flip());
        write(ch, data);
    }

    private static ByteBuffer read(SocketChannel ch, int n) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(n);
        while (b.hasRemaining()) if (ch.read(b) < 0) throw new EOFException();
        return b.flip();
    }

    private static void write(SocketChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) ch.write(b);
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
