package io.jnbd.server;

import io.jnbd.protocol.BlockStatusDescriptor;
import io.jnbd.protocol.Chunks;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.ProtocolException;
import io.jnbd.protocol.Request;
import io.jnbd.protocol.SimpleReply;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Extent;
import io.jnbd.server.backend.NbdErrorException;
import io.jnbd.server.io.BufferPool;
import io.jnbd.server.io.Channels;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.FileChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One client connection: the handshake, then the transmission phase.
 *
 * <p>Three roles share the work. This thread reads and validates requests (and write payloads), draining
 * whatever the client has sent; the server's I/O threads run backend calls; the connection's
 * {@link ReplyWriter} sends replies. Each request moves received → reading (backend) → sending → done,
 * holding one permit of the connection's window from the moment it is read until its reply is on the wire.
 */
final class Connection implements Runnable {
    private static final Logger log = LoggerFactory.getLogger(Connection.class);

    private final NbdServer server;
    private final SocketChannel channel;
    private final String peer;
    private final ConnectionStats stats = new ConnectionStats();
    private final int window;
    private final Semaphore inFlight;
    private volatile boolean transmitting;
    private volatile boolean stopRequested;
    private Session session;
    private ReplyWriter writer;

    Connection(NbdServer server, SocketChannel channel, String peer) {
        this.server = server;
        this.channel = channel;
        this.peer = peer;
        this.window = server.config().requestsInFlight();
        this.inFlight = new Semaphore(window);
    }

    String peer() {
        return peer;
    }

    boolean inTransmission() {
        return transmitting;
    }

    /** Stops reading new requests; requests already read are still served and answered. */
    void stopReading() {
        stopRequested = true;
        try {
            if (transmitting) channel.shutdownInput();
            else channel.close();
        } catch (IOException ignored) {
            // already closed
        }
    }

    void abort() {
        try {
            channel.close();
        } catch (IOException ignored) {
            // already closed
        }
    }

    @Override
    public void run() {
        String end = "client disconnected";
        try {
            session = new Handshake(channel, server.exports(), server::stopping).run();
            if (session == null) {
                log.debug("{}: handshake ended without an export", peer);
                return;
            }
            transmitting = true;
            log.info("{}: connected to export '{}' ({}structured replies{}, flags {})", peer, session.export().name(),
                session.structuredReplies() ? "" : "no ", session.blockStatusAllowed() ? ", base:allocation" : "",
                String.join(",", Nbd.transmissionFlagNames(session.transmissionFlags())));
            end = transmission();
        } catch (ProtocolException e) {
            end = "closed for a protocol error: " + e.getMessage();
        } catch (EOFException | ClosedChannelException e) {
            end = stopRequested ? "closed by server shutdown" : "client disconnected";
        } catch (IOException e) {
            end = "connection error: " + e.getMessage();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            end = "interrupted";
        } catch (RuntimeException e) {
            end = "internal error: " + e;
            log.error("{}: internal error", peer, e);
        } finally {
            abort();
            server.connectionClosed(this);
            if (session != null) log.info("{}: disconnected from '{}' ({}): {}", peer, session.export().name(), end, stats);
            else log.info("{}: {} during handshake", peer, end);
        }
    }

    /** Reads requests until DISC, EOF or a protocol error; returns why it ended. */
    private String transmission() throws IOException, ProtocolException, InterruptedException {
        Backend backend = session.export().backend();
        RequestValidator validator = new RequestValidator(session);
        writer = new ReplyWriter(channel, inFlight::release, this::abort);
        Thread writerThread = Thread.ofPlatform().name("jnbd-writer-" + peer).daemon().start(writer);
        ByteBuffer header = ByteBuffer.allocateDirect(Nbd.REQUEST_SIZE);
        ByteBuffer scratch = ByteBuffer.allocateDirect(64 * 1024);
        String end = "client disconnected";
        try {
            while (true) {
                header.clear();
                if (!Channels.readFully(channel, header)) {
                    end = stopRequested ? "closed by server shutdown" : "client disconnected";
                    break;
                }
                Request r = Request.decode(header.flip());
                stats.requests.increment();
                if (r.type() == Nbd.CMD_DISC) {
                    end = "client sent DISC";
                    break;
                }
                int error = validator.check(r);
                if (r.hasPayload()) {
                    if (r.length() > server.config().maxPayload() && r.length() > server.config().writeDiscardLimit()) {
                        throw new ProtocolException("write of " + r.length() + " bytes is beyond any payload this server reads");
                    }
                    if (error != 0) {
                        Channels.discard(channel, r.length(), scratch);
                    }
                }
                inFlight.acquire();
                if (error != 0) {
                    replyError(r, error, errorMessage(r, error));
                    continue;
                }
                BufferPool.Lease payload = null;
                if (r.hasPayload() && r.length() > 0) {
                    payload = server.buffers().acquire((int) r.length());
                    try {
                        Channels.readExactly(channel, payload.buffer());
                    } catch (IOException e) {
                        payload.release();
                        inFlight.release();
                        throw e;
                    }
                    payload.buffer().flip();
                }
                dispatch(r, backend, payload);
            }
        } finally {
            // Serve what was already accepted, then let the writer drain and stop.
            boolean drained = inFlight.tryAcquire(window, 60, TimeUnit.SECONDS);
            writer.finish();
            writerThread.join(TimeUnit.SECONDS.toMillis(10));
            if (drained) inFlight.release(window);
        }
        return end;
    }

    private static String errorMessage(Request r, int error) {
        return switch (error) {
            case Nbd.EPERM -> "export is read-only";
            case Nbd.ENOSPC -> "request runs past the end of the export";
            case Nbd.EOVERFLOW -> "request is larger than the maximum payload";
            default -> "invalid request " + r;
        };
    }

    private void dispatch(Request r, Backend backend, BufferPool.Lease payload) {
        if (r.type() == Nbd.CMD_READ) {
            if (r.length() == 0) {
                replyOk(r);
                return;
            }
            FileChannel source = backend.zeroCopySource();
            if (source != null) {
                // Page cache to socket by sendfile: no buffer, no I/O thread; the writer does the whole transfer.
                stats.bytesRead.add(r.length());
                writer.send(ReplyWriter.Part.withFile(readHeader(r, r.offset(), (int) r.length(), true), source,
                    r.offset(), r.length(), true));
                return;
            }
            ReadPlan plan = server.readPlan(session.export(), r, session.structuredReplies());
            if (plan.chunks() > 1) {
                new SplitRead(r, backend, plan).start();
                return;
            }
        }
        server.io().execute(() -> serve(r, backend, payload));
    }

    private void serve(Request r, Backend backend, BufferPool.Lease payload) {
        try {
            switch (r.type()) {
                case Nbd.CMD_READ -> {
                    BufferPool.Lease lease = server.buffers().acquire((int) r.length());
                    try {
                        backend.read(r.offset(), lease.buffer());
                    } catch (IOException | RuntimeException e) {
                        lease.release();
                        throw e;
                    }
                    stats.bytesRead.add(r.length());
                    writer.send(ReplyWriter.Part.withData(readHeader(r, r.offset(), (int) r.length(), true),
                        lease.buffer().flip(), lease, true));
                    return;
                }
                case Nbd.CMD_WRITE -> {
                    if (payload != null) backend.write(r.offset(), payload.buffer(), r.has(Nbd.CMD_FLAG_FUA));
                    stats.bytesWritten.add(r.length());
                }
                case Nbd.CMD_FLUSH -> backend.flush();
                case Nbd.CMD_TRIM -> {
                    if (r.length() > 0) backend.trim(r.offset(), r.length(), r.has(Nbd.CMD_FLAG_FUA));
                }
                case Nbd.CMD_WRITE_ZEROES -> {
                    if (r.length() > 0) {
                        backend.zero(r.offset(), r.length(), !r.has(Nbd.CMD_FLAG_NO_HOLE),
                            r.has(Nbd.CMD_FLAG_FAST_ZERO), r.has(Nbd.CMD_FLAG_FUA));
                    }
                }
                case Nbd.CMD_CACHE -> {
                    if (r.length() > 0) backend.cache(r.offset(), r.length());
                }
                case Nbd.CMD_BLOCK_STATUS -> {
                    blockStatus(r, backend);
                    return;
                }
                default -> throw new IllegalStateException("unvalidated command " + r);
            }
            replyOk(r);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            replyError(r, Nbd.ESHUTDOWN, "server is shutting down");
        } catch (Throwable t) {
            int error = NbdErrorException.errorOf(t);
            if (error == Nbd.EIO) log.warn("{}: {} failed: {}", peer, r, t.toString());
            replyError(r, error, t.getMessage() != null ? t.getMessage() : t.toString());
        } finally {
            if (payload != null) payload.release();
        }
    }

    private void blockStatus(Request r, Backend backend) throws IOException {
        List<Extent> extents = backend.extents(r.offset(), r.length());
        List<BlockStatusDescriptor> out = new ArrayList<>();
        long left = r.length();
        for (Extent e : extents) {
            if (left <= 0) break;
            long len = Math.min(Math.min(e.length(), left), 0xFFFF_F000L); // stays within 32 bits, 4K-aligned
            out.add(new BlockStatusDescriptor(len, e.flags()));
            left -= len;
            if (r.has(Nbd.CMD_FLAG_REQ_ONE)) break;
        }
        if (out.isEmpty()) out.add(new BlockStatusDescriptor(Math.min(r.length(), 0xFFFF_F000L), 0));
        ByteBuffer b = ByteBuffer.allocate(Chunks.blockStatusSize(out.size()));
        Chunks.blockStatus(b, Nbd.REPLY_FLAG_DONE, r.cookie(), session.metaContextId(), out);
        writer.send(ReplyWriter.Part.of(b.flip(), true));
    }

    /** The header in front of read data: a simple reply, or an OFFSET_DATA chunk. */
    private ByteBuffer readHeader(Request r, long offset, int length, boolean done) {
        ByteBuffer h;
        if (session.structuredReplies()) {
            h = ByteBuffer.allocate(Chunks.OFFSET_DATA_PREFIX);
            Chunks.offsetDataPrefix(h, done ? Nbd.REPLY_FLAG_DONE : 0, r.cookie(), offset, length);
        } else {
            h = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE);
            SimpleReply.encode(h, 0, r.cookie());
        }
        return h.flip();
    }

    private void replyOk(Request r) {
        ByteBuffer h;
        if (r.type() == Nbd.CMD_READ && session.structuredReplies()) {
            h = ByteBuffer.allocate(Nbd.STRUCTURED_REPLY_SIZE);
            Chunks.none(h, r.cookie());
        } else {
            h = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE);
            SimpleReply.encode(h, 0, r.cookie());
        }
        writer.send(ReplyWriter.Part.of(h.flip(), true));
    }

    private void replyError(Request r, int error, String message) {
        stats.errors.increment();
        ByteBuffer h;
        if (session.structuredReplies()) {
            String msg = message.length() > 1024 ? message.substring(0, 1024) : message;
            h = ByteBuffer.allocate(Chunks.errorSize(msg));
            Chunks.error(h, Nbd.REPLY_FLAG_DONE, r.cookie(), error, msg);
        } else {
            h = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE);
            SimpleReply.encode(h, error, r.cookie());
        }
        writer.send(ReplyWriter.Part.of(h.flip(), true));
    }

    /**
     * A large read split into chunks read in parallel, each sent as its own OFFSET_DATA chunk as soon as the
     * disk delivers it, in whatever order that is: the network starts before the disk has finished the
     * request (gmblock's synchronized multi-stream sends). At most {@code streams} chunks are read at once.
     */
    private final class SplitRead {
        private final Request request;
        private final Backend backend;
        private final ReadPlan plan;
        private final AtomicInteger next = new AtomicInteger();
        private int unsent;

        SplitRead(Request request, Backend backend, ReadPlan plan) {
            this.request = request;
            this.backend = backend;
            this.plan = plan;
            this.unsent = plan.chunks();
        }

        void start() {
            for (int i = 0; i < Math.min(plan.streams(), plan.chunks()); i++) submitNext();
        }

        private void submitNext() {
            int index = next.getAndIncrement();
            if (index < plan.chunks()) server.io().execute(() -> readChunk(index));
        }

        private void readChunk(int index) {
            long offset = request.offset() + (long) index * plan.chunkSize();
            int length = (int) Math.min(plan.chunkSize(), request.offset() + request.length() - offset);
            BufferPool.Lease lease = null;
            int error = 0;
            String message = null;
            try {
                lease = server.buffers().acquire(length);
                backend.read(offset, lease.buffer());
                lease.buffer().flip();
            } catch (Throwable t) {
                if (lease != null) lease.release();
                lease = null;
                error = t instanceof InterruptedException ? Nbd.ESHUTDOWN : NbdErrorException.errorOf(t);
                message = t.getMessage() != null ? t.getMessage() : t.toString();
                log.warn("{}: {} failed at offset {}: {}", peer, request, offset, message);
            }
            submitNext();
            // Ordering the sends under one lock lets the last chunk to arrive carry the DONE flag.
            synchronized (this) {
                boolean last = --unsent == 0;
                if (lease != null) {
                    stats.bytesRead.add(length);
                    writer.send(ReplyWriter.Part.withData(readHeader(request, offset, length, last), lease.buffer(), lease, last));
                } else {
                    stats.errors.increment();
                    ByteBuffer h = ByteBuffer.allocate(Chunks.errorOffsetSize(message));
                    Chunks.errorOffset(h, last ? Nbd.REPLY_FLAG_DONE : 0, request.cookie(), error, message, offset);
                    writer.send(ReplyWriter.Part.of(h.flip(), last));
                }
            }
        }
    }
}
