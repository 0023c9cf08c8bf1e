package io.jnbd.server;

import io.jnbd.protocol.Chunks;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.protocol.SimpleReply;
import io.jnbd.server.backend.NbdErrors;
import io.jnbd.server.io.Releasable;
import java.nio.ByteBuffer;
import io.jnbd.server.io.PageCacheSource;
import java.util.List;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How one connection's replies are encoded: simple replies, or structured reply chunks once the client has
 * asked for them. Also where a failure becomes an NBD error: its errno, its message, and a log line when it
 * deserves an operator's attention.
 */
final class Replies {
    private static final Logger log = LoggerFactory.getLogger(Replies.class);
    /** Error messages are cut here: the client logs them, and a long one says nothing more. */
    private static final int MAX_MESSAGE = 1024;

    private final Session session;
    private final ConnectionStats stats;
    /**
     * Failures on this connection so far, by command and errno. A broken disk, or a bitmap removed under a client that
     * still asks for it, fails every request alike: a line each would bury the log, so the first of a kind is logged
     * at WARN, then the 10th, the 100th and so on, and the ones between at DEBUG.
     */
    private final ConcurrentHashMap<Integer, AtomicLong> failures = new ConcurrentHashMap<>();
    private final String peer;

    Replies(Session session, ConnectionStats stats, String peer) {
        this.session = session;
        this.stats = stats;
        this.peer = peer;
    }

    /** A failed request's errno and message. */
    record Failure(int error, String message) {}

    /** The NBD error for {@code t}, logged unless it is routine (see below). */
    Failure failure(Request r, Throwable t) {
        while (t instanceof CompletionException && t.getCause() != null) t = t.getCause();
        int error = NbdErrors.of(t);
        // A backend failure is worth an operator's attention (a full disk, a read-only file system, a broken
        // one), except a fast zero the backend declined and a request cut short by shutdown.
        if (error == Nbd.ENOTSUP || error == Nbd.ESHUTDOWN) {
            log.debug("{}: {} failed: {}", peer, r, t.toString());
        } else {
            long n = failures.computeIfAbsent(r.type() << 16 | error & 0xffff, k -> new AtomicLong()).incrementAndGet();
            if (!loud(n)) log.debug("{}: {} failed: {}", peer, r, t.toString());
            else if (n == 1) log.warn("{}: {} failed: {}", peer, r, t.toString());
            else log.warn("{}: {} failed: {} ({} {} failures with {} on this connection; the others are logged at debug)",
                peer, r, t.toString(), n, Nbd.commandName(r.type()), Nbd.errorName(error));
        }
        return new Failure(error, t.getMessage() != null ? t.getMessage() : t.toString());
    }

    /** Whether the {@code n}th failure of a kind is logged at WARN: the 1st, 10th, 100th, ... */
    static boolean loud(long n) {
        while (n >= 10 && n % 10 == 0) n /= 10;
        return n == 1;
    }

    /** The reply that completes a request without data. */
    ReplyWriter.Part ok(InFlight f) {
        Request r = f.request;
        ByteBuffer h;
        if (r.type() == Nbd.CMD_READ && session.structuredReplies()) {
            h = ByteBuffer.allocate(Nbd.STRUCTURED_REPLY_SIZE);
            Chunks.none(h, r.cookie());
        } else {
            h = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE);
            SimpleReply.encode(h, 0, r.cookie());
        }
        return ReplyWriter.Part.of(h.flip(), f);
    }

    ReplyWriter.Part error(InFlight f, Failure failure) {
        return error(f, failure.error(), failure.message());
    }

    ReplyWriter.Part error(InFlight f, int error, String message) {
        return error(f.request, error, message, f);
    }

    /**
     * NBD_ESHUTDOWN for a request read after the server began to drain. It completes nothing: the request gave its
     * window share back when it was refused (Window#release).
     */
    ReplyWriter.Part refusal(Request r) {
        return error(r, Nbd.ESHUTDOWN, "server is shutting down", null);
    }

    private ReplyWriter.Part error(Request r, int error, String message, InFlight completes) {
        stats.error(error);
        ByteBuffer h;
        if (session.structuredReplies()) {
            String msg = message.length() > MAX_MESSAGE ? message.substring(0, MAX_MESSAGE) : message;
            h = ByteBuffer.allocate(Chunks.errorSize(msg));
            Chunks.error(h, Nbd.REPLY_FLAG_DONE, r.cookie(), error, msg);
        } else {
            h = ByteBuffer.allocate(Nbd.SIMPLE_REPLY_SIZE);
            SimpleReply.encode(h, error, r.cookie());
        }
        return ReplyWriter.Part.of(h.flip(), completes);
    }

    /** A failed chunk of a split read: an error chunk naming its offset; {@code completes} is set on the last. */
    ReplyWriter.Part errorAt(Request r, Failure failure, long offset, InFlight completes) {
        stats.error(failure.error());
        String msg = message(failure);
        ByteBuffer h = ByteBuffer.allocate(Chunks.errorOffsetSize(msg));
        Chunks.errorOffset(h, completes != null ? Nbd.REPLY_FLAG_DONE : 0, r.cookie(), failure.error(), msg, offset);
        return ReplyWriter.Part.of(h.flip(), completes);
    }

    /** Read data in a buffer: {@code completes} is the request it ends, or null if more chunks follow. */
    ReplyWriter.Part data(Request r, long offset, ByteBuffer data, Releasable lease, InFlight completes) {
        return ReplyWriter.Part.withData(readHeader(r, offset, data.remaining(), completes != null), data, lease, completes);
    }

    /**
     * The first piece of a read sent as one reply behind one header (see {@link ReadPlan#ordered}): the header
     * covers the whole read, and the other pieces follow it on the wire with none of their own.
     */
    ReplyWriter.Part orderedHead(Request r, ByteBuffer data, Releasable lease, InFlight completes) {
        return ReplyWriter.Part.withData(readHeader(r, r.offset(), (int) r.length(), true), data, lease, completes);
    }

    /** Read data sent from the file itself (sendfile). */
    ReplyWriter.Part file(InFlight f, PageCacheSource file) {
        Request r = f.request;
        return ReplyWriter.Part.withFile(readHeader(r, r.offset(), (int) r.length(), true), file, r.offset(), r.length(), f);
    }

    /**
     * The reply to a block status request: one chunk per selected context, in the order given, each its
     * descriptors or its error; the last one ends the reply.
     */
    ReplyWriter.Part blockStatus(InFlight f, List<BlockStatus.Answer> answers) {
        Request r = f.request;
        int size = 0;
        for (BlockStatus.Answer a : answers) {
            size += a.failure() == null ? Chunks.blockStatusSize(a.descriptors().size()) : Chunks.errorSize(message(a.failure()));
        }
        ByteBuffer b = ByteBuffer.allocate(size);
        for (int i = 0; i < answers.size(); i++) {
            BlockStatus.Answer a = answers.get(i);
            int flags = i == answers.size() - 1 ? Nbd.REPLY_FLAG_DONE : 0;
            if (a.failure() == null) {
                Chunks.blockStatus(b, flags, r.cookie(), a.context().id(), a.descriptors());
            } else {
                stats.error(a.failure().error());
                Chunks.error(b, flags, r.cookie(), a.failure().error(), message(a.failure()));
            }
        }
        return ReplyWriter.Part.of(b.flip(), f);
    }

    private static String message(Failure failure) {
        String m = failure.message();
        return m.length() > MAX_MESSAGE ? m.substring(0, MAX_MESSAGE) : m;
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
}
