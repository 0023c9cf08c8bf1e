package io.jnbd.client;

import io.jnbd.protocol.Chunks;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.ProtocolException;
import io.jnbd.protocol.SimpleReply;
import io.jnbd.protocol.StructuredReplyHeader;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * The receiving side of a connection, run by its one reader thread: reads every reply, matches it to its
 * request by cookie and places read data into the caller's buffer, each chunk at its offset.
 *
 * <p>Replies are taken in through a buffer, so that those that arrived together cost one read: a structured
 * read chunk is four pieces (the first 16 bytes of its header, the other 4, its offset, its data), and read
 * one by one they were four system calls per 4 KiB read. Data of {@link #DIRECT_READ_MIN} or more goes from the
 * socket straight into the caller's buffer, past this one.
 */
final class Receiver {

    /** Block status chunks are bounded by the spec's advice (2^20 extents); more is a broken or hostile server. */
    private static final long MAX_BLOCK_STATUS_CHUNK = 4 + 8L * (1 << 20);
    /** Error chunks carry at most a 4096-byte message plus fixed fields. */
    private static final long MAX_ERROR_CHUNK = 6 + io.jnbd.protocol.Strings.MAX_STRING + 8;

    private final Connection connection;
    private final Transport transport;
    private final String peer;
    private final ExportInfo info;
    /** The negotiated metadata contexts by this connection's ids. */
    private final java.util.Map<Integer, String> contexts;
    /** The rest of a payload from this size on is read into its destination directly rather than through {@link #in}. */
    static final int DIRECT_READ_MIN = 16 * 1024;

    private final ByteBuffer replyHeader = ByteBuffer.allocateDirect(Nbd.STRUCTURED_REPLY_SIZE);
    private final ByteBuffer scratch = ByteBuffer.allocateDirect(64 * 1024);
    /** Received and not yet parsed, between position and limit. */
    private final ByteBuffer in = ByteBuffer.allocateDirect(64 * 1024).flip();

    Receiver(Connection connection, Transport transport, String peer, ExportInfo info, java.util.Map<Integer, String> contexts) {
        this.connection = connection;
        this.transport = transport;
        this.peer = peer;
        this.info = info;
        this.contexts = java.util.Map.copyOf(contexts);
    }

    void run() {
        try (Piped piped = payload) {
            while (true) readReply();
        } catch (ProtocolException e) {
            connection.fail(new NbdProtocolException("protocol violation by " + peer + ": " + e.getMessage() + "; connection closed"));
        } catch (EOFException e) {
            connection.fail(new NbdConnectionException("connection to " + peer + " lost: server closed it"
                + (connection.inFlight() == 0 ? "" : " with " + connection.inFlight() + " request(s) in flight"), e));
        } catch (IOException e) {
            connection.fail(new NbdConnectionException("connection to " + peer + " lost: " + e.getMessage(), e));
        } catch (RuntimeException e) {
            connection.fail(new NbdConnectionException("client bug while reading from " + peer + ": " + e, e));
        } finally {
            connection.deliverHeld();
        }
    }

    private void readReply() throws IOException, ProtocolException {
        replyHeader.clear().limit(Nbd.SIMPLE_REPLY_SIZE);
        readFully(replyHeader);
        replyHeader.flip();
        int magic = replyHeader.getInt();
        if (magic == Nbd.SIMPLE_REPLY_MAGIC) {
            simpleReply(SimpleReply.decodeAfterMagic(replyHeader));
        } else if (magic == Nbd.STRUCTURED_REPLY_MAGIC && info.structuredReplies()) {
            replyHeader.limit(Nbd.STRUCTURED_REPLY_SIZE).position(Nbd.SIMPLE_REPLY_SIZE);
            readFully(replyHeader);
            replyHeader.position(4);
            chunk(StructuredReplyHeader.decodeAfterMagic(replyHeader));
        } else {
            throw new ProtocolException("bad reply magic 0x" + Integer.toHexString(magic));
        }
    }

    private Pending lookup(long cookie) throws ProtocolException {
        Pending p = connection.lookup(cookie);
        if (p == null) throw new ProtocolException("reply with unknown cookie " + Long.toUnsignedString(cookie));
        return p;
    }

    private void simpleReply(SimpleReply reply) throws IOException, ProtocolException {
        Pending p = lookup(reply.cookie());
        if (reply.error() != 0) {
            connection.finish(p, p.serverError(reply.error(), ""));
            return;
        }
        if (p.type == Nbd.CMD_READ) {
            // Structured servers must not do this for READ, but the data's length is known from the request,
            // so it still decodes unambiguously.
            receiveInto(p, 0, (int) p.length);
            p.cover(0, p.length);
        } else if (p.type == Nbd.CMD_BLOCK_STATUS) {
            throw new ProtocolException("simple reply without error to " + p.describe());
        }
        connection.finish(p, null);
    }

    private void chunk(StructuredReplyHeader h) throws IOException, ProtocolException {
        Pending p = lookup(h.cookie());
        long length = h.length();
        switch (h.type()) {
            case Nbd.REPLY_TYPE_NONE -> {
                if (length != 0) throw new ProtocolException("NONE chunk with payload for " + p.describe());
                if (!h.done()) throw new ProtocolException("NONE chunk without DONE for " + p.describe());
            }
            case Nbd.REPLY_TYPE_OFFSET_DATA -> {
                if (p.type != Nbd.CMD_READ) throw new ProtocolException("OFFSET_DATA chunk for " + p.describe());
                if (length < 9) throw new ProtocolException("OFFSET_DATA chunk of " + length + " bytes");
                long offset = readPayload(8).getLong();
                long dataLength = length - 8;
                long at = p.placeChunk(offset, dataLength);
                receiveInto(p, at, (int) dataLength);
            }
            case Nbd.REPLY_TYPE_OFFSET_HOLE -> {
                if (p.type != Nbd.CMD_READ) throw new ProtocolException("OFFSET_HOLE chunk for " + p.describe());
                if (length != 12) throw new ProtocolException("OFFSET_HOLE chunk of " + length + " bytes");
                ByteBuffer b = readPayload(12);
                long offset = b.getLong();
                long holeLength = Integer.toUnsignedLong(b.getInt());
                if (holeLength == 0) throw new ProtocolException("OFFSET_HOLE of length 0 for " + p.describe());
                long at = p.placeChunk(offset, holeLength);
                if (p.claim()) {
                    try {
                        if (p.sink != null) {
                            p.sink.zeroes(offset, holeLength);
                        } else {
                            zeroFill(p.data, p.data.position() + (int) at, (int) holeLength);
                        }
                    } catch (RuntimeException e) {
                        p.recordLocalFailure(e);
                    } finally {
                        connection.letGo(p);
                    }
                }
            }
            case Nbd.REPLY_TYPE_BLOCK_STATUS -> {
                if (p.type != Nbd.CMD_BLOCK_STATUS) throw new ProtocolException("BLOCK_STATUS chunk for " + p.describe());
                if (length > MAX_BLOCK_STATUS_CHUNK) throw new ProtocolException("BLOCK_STATUS chunk of " + length + " bytes");
                ByteBuffer payload = ByteBuffer.allocate((int) length);
                readFully(payload);
                var status = Chunks.decodeBlockStatus(payload.flip());
                String context = contexts.get(status.contextId());
                if (context == null) {
                    throw new ProtocolException("BLOCK_STATUS chunk for context id "
                        + Integer.toUnsignedString(status.contextId()) + ", which was not negotiated, for " + p.describe());
                }
                p.addExtents(context, status.descriptors());
            }
            default -> {
                if (!h.isError()) {
                    throw new ProtocolException("unexpected chunk type " + h.type() + " for " + p.describe());
                }
                if (length < 6 || length > MAX_ERROR_CHUNK) {
                    throw new ProtocolException("error chunk of " + length + " bytes for " + p.describe());
                }
                ByteBuffer payload = ByteBuffer.allocate((int) length);
                readFully(payload);
                payload.flip();
                if (h.type() == Nbd.REPLY_TYPE_ERROR || h.type() == Nbd.REPLY_TYPE_ERROR_OFFSET) {
                    var e = Chunks.decodeError(h.type(), payload);
                    if (e.error() == 0) throw new ProtocolException("error chunk with error 0 for " + p.describe());
                    String where = e.offset() >= 0 ? " at offset " + Long.toUnsignedString(e.offset()) : "";
                    p.recordError(e.error(), e.message() + where);
                } else {
                    // The spec: an unknown error type still fails the request, transmission may go on.
                    int error = payload.getInt();
                    p.recordError(error == 0 ? Nbd.EIO : error, "error chunk of unknown type " + h.type());
                }
            }
        }
        if (h.done()) connection.finish(p, p.outcome());
    }

    private ByteBuffer readPayload(int n) throws IOException {
        scratch.clear().limit(n);
        readFully(scratch);
        return scratch.flip();
    }

    /** Reads {@code n} bytes of block data into the request's buffer at {@code at}, or discards them if settled. */
    private void receiveInto(Pending p, long at, int n) throws IOException {
        if (!p.claim()) {
            discard(n);
            return;
        }
        try {
            if (p.sink != null) {
                payload.deliver(p, at, n);
            } else {
                int start = p.data.position() + (int) at;
                readFully(p.data.slice(start, n));
            }
        } finally {
            connection.letGo(p);
        }
    }

    private void discard(long n) throws IOException {
        for (long left = n; left > 0; ) {
            scratch.clear().limit((int) Math.min(left, scratch.capacity()));
            readFully(scratch);
            left -= scratch.limit();
        }
    }

    private final Piped payload = new Piped();

    /**
     * The one data chunk being handed to a {@link ReadSink}, reused for every chunk. Its bytes are partly in
     * {@link #in} already (the read that brought the chunk's header brought the start of its data too), the rest
     * still in the socket.
     */
    private final class Piped implements ReadSink.Payload, AutoCloseable {
        private static final int PEEK_MAX = 4096;
        private int length;
        private long left;
        private boolean active;
        /** The pipe a splice goes through; made on first use, by and for this reader thread. */
        private Splice pipe;
        /** Set when this connection failed in the middle of a spliced payload; {@link #deliver} then fails it. */
        private IOException sourceFailure;

        void deliver(Pending p, long at, int n) throws IOException {
            length = n;
            left = n;
            active = true;
            try {
                p.sink.data(p.offset + at, n, this);
            } catch (IOException | RuntimeException e) {
                // Part of the payload consumed and the rest unknown: the stream cannot be followed any more.
                if (left != 0 && left != length) throw e instanceof IOException io ? io : new IOException(e);
                p.recordLocalFailure(e);
            } finally {
                active = false;
            }
            IOException lost = sourceFailure;
            if (lost != null) {
                sourceFailure = null;
                throw lost; // this connection failed in the middle of the payload: its stream cannot be followed
            }
            if (left > 0) discard(left);
        }

        private void check() {
            if (!active) throw new IllegalStateException("a read's payload is only valid during ReadSink.data");
        }

        @Override
        public void peek(ByteBuffer dst) throws IOException {
            check();
            if (left != length) throw new IllegalStateException("peek after part of the payload was consumed");
            int k = (int) Math.min(Math.min(dst.remaining(), PEEK_MAX), left);
            if (in.remaining() < k) {
                in.compact();
                connection.uncork();
                while (in.position() < k) {
                    if (transport.read(in) < 0) {
                        in.flip();
                        throw new EOFException();
                    }
                }
                in.flip();
            }
            dst.put(in.slice(in.position(), k));
        }

        @Override
        public void readFully(ByteBuffer dst) throws IOException {
            check();
            if (dst.remaining() != left) {
                throw new IllegalArgumentException("buffer has " + dst.remaining() + " bytes left, the payload " + left);
            }
            Receiver.this.readFully(dst);
            left = 0;
        }

        @Override
        public java.util.concurrent.CompletableFuture<Void> spliceTo(NbdClient dst, long dstOffset) throws IOException {
            check();
            if (left != length) throw new IllegalStateException("splice after part of the payload was consumed");
            java.util.concurrent.CompletableFuture<Void> written;
            try {
                written = dst.writeSpliced(dstOffset, length, this::stream);
            } catch (IOException e) {
                // The destination's failure (this connection is in step: the payload untouched, or read and dropped),
                // or both sides' (then deliver fails this connection too): either way the write's outcome.
                return java.util.concurrent.CompletableFuture.failedFuture(e);
            }
            if (sourceFailure == null) return written;
            // The destination took zeroes in place of what this connection never delivered: its write must not count.
            IOException lost = sourceFailure;
            return written.handle((v, e) -> {
                throw new java.util.concurrent.CompletionException(new NbdConnectionException("connection to " + peer
                    + " failed in the middle of the data being passed on (zeroes were written in its place): " + lost.getMessage(), lost));
            });
        }

        /**
         * Writes the request header, then the payload: what {@link #in} holds of it, then the rest by splice. A
         * failure of one side leaves the other in step: if the destination fails, the rest of the payload is read
         * from this connection and dropped; if this connection fails, the destination's request is completed with
         * zeroes (and its write then failed, see {@link #spliceTo}). Only when both fail does the exception leave.
         */
        private void stream(java.nio.channels.SocketChannel to, ByteBuffer header) throws IOException {
            int buffered = (int) Math.min(in.remaining(), left);
            ByteBuffer[] both = {header, in.slice(in.position(), buffered)};
            while (both[1].hasRemaining() || header.hasRemaining()) to.write(both);
            in.position(in.position() + buffered);
            left -= buffered;
            if (left == 0) return;
            if (pipe == null) pipe = Splice.open();
            int from = Splice.fd(transport.socket);
            int toFd = Splice.fd(to);
            if (from < 0 || toFd < 0) throw new IOException("no descriptor for splice");
            long n = left;
            left = -1; // from here until one side is back in step, both streams are in the middle of the payload
            Splice.Progress progress = new Splice.Progress();
            try {
                connection.uncork();
                pipe.transfer(from, toFd, n, progress);
                left = 0;
            } catch (IOException e) {
                if (progress.sourceFailed) {
                    sourceFailure = e;
                    try {
                        pipe.passRest(toFd, progress);
                        writeZeroes(to, n - progress.taken);
                    } catch (IOException destinationToo) {
                        closePipe();
                        e.addSuppressed(destinationToo);
                        throw e;
                    }
                    return;
                }
                closePipe(); // what it held was bound for the destination, which is gone
                Receiver.this.discard(n - progress.taken);
                left = 0;
                throw e;
            }
        }

        private void closePipe() {
            pipe.close();
            pipe = null;
        }

        private static void writeZeroes(java.nio.channels.SocketChannel to, long n) throws IOException {
            ByteBuffer zeroes = ByteBuffer.allocateDirect((int) Math.min(n, 64 * 1024));
            for (long done = 0; done < n; ) {
                zeroes.clear().limit((int) Math.min(zeroes.capacity(), n - done));
                while (zeroes.hasRemaining()) done += to.write(zeroes);
            }
        }

        @Override
        public void close() {
            if (pipe != null) pipe.close();
        }
    }

    private static void zeroFill(ByteBuffer buf, int from, int n) {
        java.lang.foreign.MemorySegment.ofBuffer(buf.slice(from, n)).fill((byte) 0);
    }

    /** Fills {@code buf}: first from what was received already, then from the connection. */
    private void readFully(ByteBuffer buf) throws IOException {
        take(buf);
        // About to wait for the server: first send what this thread's callbacks submitted meanwhile.
        if (buf.hasRemaining()) connection.uncork();
        while (buf.hasRemaining()) {
            if (buf.remaining() >= DIRECT_READ_MIN) {
                if (transport.read(buf) < 0) throw new EOFException();
                continue;
            }
            in.clear();
            int n = transport.read(in);
            in.flip();
            if (n < 0) throw new EOFException();
            take(buf);
        }
    }

    private void take(ByteBuffer buf) {
        int n = Math.min(in.remaining(), buf.remaining());
        if (n == 0) return;
        buf.put(in.slice(in.position(), n));
        in.position(in.position() + n);
    }
}
