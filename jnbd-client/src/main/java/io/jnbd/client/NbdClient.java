package io.jnbd.client;

import io.jnbd.protocol.Nbd;

import java.io.IOException;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.FileChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A client for one NBD export: pipelined, asynchronous I/O straight into and out of the caller's buffers.
 *
 * <p>Every operation returns a {@link CompletableFuture} at once, never waiting for the server: many may be
 * in flight together (up to {@link ClientOptions#requestsInFlight()} per connection; further ones are queued
 * and sent in order as slots free up) and they complete in whatever order the server answers. Reads and writes larger than the server's maximum payload
 * are split; offsets and lengths must be multiples of the server's minimum block size. Data of a read is
 * placed by the connection's reader thread directly into the slice of the destination buffer that each
 * reply chunk covers, so use direct buffers to avoid the JDK's own staging copy.
 *
 * <p>Futures are completed only after the client has let go of every lock it holds: on the connection's reader
 * thread for replies, the timer thread for timeouts, otherwise on the thread that learnt the outcome, but never on
 * a connection's sender thread (docs/client.md, "Where callbacks run"). A callback may submit requests and may
 * wait for them, except on the reader thread of the connection that would read the reply.
 *
 * <p>Failures complete the future exceptionally with an {@link NbdException}: {@link NbdErrorException} when
 * the server reports an error (its message names the error, e.g. EIO, and the request),
 * {@link NbdConnectionException} when the connection is lost, {@link NbdProtocolException} when the server
 * breaks the protocol (the connection is then closed) and {@link NbdTimeoutException} when a request outlives
 * {@link ClientOptions#requestTimeout()}. With {@link ClientOptions#withReconnect} a lost connection is connected
 * again instead and its unanswered requests sent again: they fail only if the server stays away longer than the
 * delay or comes back with another export (docs/client.md, "Reconnect").
 *
 * <pre>{@code
 * try (NbdClient disk = NbdClient.connect(URI.create("nbd://localhost/disk"))) {
 *     ByteBuffer buf = ByteBuffer.allocateDirect(4096);
 *     disk.read(0, buf).join();                      // asynchronous, waited for here; advances the position
 *     disk.blocking().write(4096, buf.flip(), false); // or the blocking view
 *     disk.blocking().flush();
 * }
 * }</pre>
 */
public final class NbdClient implements AutoCloseable {

    /** Requests up to this size are kept together on one connection (see {@link #pick}). */
    private static final long STICKY_MAX_BYTES = 64 * 1024;
    /** Bound on one TRIM / WRITE_ZEROES / CACHE / BLOCK_STATUS request; the spec lets servers refuse huge ones. */
    private static final long MAX_EFFECT_LENGTH = 1L << 30;

    private final NbdUri uri;
    private final ClientOptions options;
    private final ExportInfo info;
    private final List<Lane> connections;
    private final ScheduledExecutorService timer;
    private final ReadCache cache;
    private final long maxRequest;
    private final BlockingNbdClient blocking = new BlockingNbdClient(this);
    private final AtomicBoolean closed = new AtomicBoolean();
    private volatile ByteBuffer zeroes;
    /** Where the last small request went (see {@link #pick}); a hint, so racing writers do no harm. */
    private volatile Lane recent;
    private final int stickyLoad;

    private NbdClient(NbdUri uri, ClientOptions options, ExportInfo info, List<Lane> connections,
                      ScheduledExecutorService timer) {
        this.uri = uri;
        this.options = options;
        this.info = info;
        this.connections = List.copyOf(connections);
        this.timer = timer;
        this.stickyLoad = Math.max(1, options.requestsInFlight() / 2);
        int min = info.minimumBlockSize();
        this.maxRequest = Math.max(min, Math.min(info.maximumPayload(), Nbd.DEFAULT_MAX_PAYLOAD) / min * min);
        if (options.cacheSize() > 0) {
            int page = Math.max(options.cachePageSize(), min);
            this.cache = new ReadCache(this::readUncached, size(), options.cacheSize(), options.readahead(), page);
        } else {
            this.cache = null;
        }
    }

    /** Connects with {@link ClientOptions#defaults()}. */
    public static NbdClient connect(String uri) throws IOException {
        return connect(NbdUri.parse(uri), ClientOptions.defaults());
    }

    /** Connects with {@link ClientOptions#defaults()}. */
    public static NbdClient connect(URI uri) throws IOException {
        return connect(NbdUri.parse(uri), ClientOptions.defaults());
    }

    public static NbdClient connect(URI uri, ClientOptions options) throws IOException {
        return connect(NbdUri.parse(uri), options);
    }

    /**
     * Connects to the export named by {@code uri} and finishes the handshake. With
     * {@link ClientOptions#connections()} above one, further connections are opened only if the server
     * advertises CAN_MULTI_CONN (otherwise their caches could disagree). With TLS ({@code nbds} URIs, or
     * {@link ClientOptions#withTls}) every connection starts with STARTTLS and fails if the server declines it;
     * unusable TLS files fail with {@link NbdConfigException} before anything is sent.
     */
    public static NbdClient connect(NbdUri uri, ClientOptions options) throws IOException {
        ScheduledExecutorService timer = Connector.newTimer();
        try {
            List<Lane> opened = Connector.openAll(uri, options, timer);
            return new NbdClient(uri, options, opened.getFirst().info(), opened, timer);
        } catch (IOException | RuntimeException e) {
            Connector.stopTimer(timer);
            throw e;
        }
    }

    /** The exports the server lists ({@code NBD_OPT_LIST}); the export part of {@code uri} is ignored. */
    public static List<ExportListing> list(URI uri) throws IOException {
        return list(NbdUri.parse(uri), ClientOptions.defaults());
    }

    public static List<ExportListing> list(NbdUri uri, ClientOptions options) throws IOException {
        return Connector.list(uri, options);
    }

    /**
     * The metadata contexts {@code uri}'s export offers that match {@code queries} ({@code NBD_OPT_LIST_META_CONTEXT}),
     * for example {@code "qemu:dirty-bitmap:"} for its dirty bitmaps; with no query, every context the server
     * chooses to list. A connection of its own, ended with ABORT.
     */
    public static List<String> listMetaContexts(NbdUri uri, ClientOptions options, String... queries) throws IOException {
        return Connector.listMetaContexts(uri, options, List.of(queries));
    }

    /** What the handshake reported: size, flags, block size constraints, negotiated features. */
    public ExportInfo info() {
        return info;
    }

    public long size() {
        return info.size();
    }

    public NbdUri uri() {
        return uri;
    }

    /**
     * The TLS protocol and cipher suite the connections negotiated (e.g. "TLSv1.3 TLS_AES_256_GCM_SHA384"), or
     * null if they are plain.
     */
    public String tls() {
        return connections.getFirst().tls();
    }

    /** The sockets of the connections, for tests that look at them from the operating system's side. */
    List<SocketChannel> channels() {
        return connections.stream().map(Lane::channel).toList();
    }

    /** Connections actually open: one unless the server offers CAN_MULTI_CONN and more were asked for. */
    public int connectionCount() {
        return connections.size();
    }

    /**
     * Whether a request made now has a connection to go on: false once the client is closed or every connection
     * is lost (the server closed it, or it failed), which a caller that connects again asks before sending.
     */
    public boolean connected() {
        return !closed.get() && connections.stream().anyMatch(Lane::alive);
    }

    /** A view with blocking methods that throw {@link IOException}, for simple programs. */
    public BlockingNbdClient blocking() {
        return blocking;
    }

    /**
     * Reads {@code dst.remaining()} bytes at {@code offset} into {@code dst} from its position. As with
     * {@link java.nio.channels.AsynchronousFileChannel}: on success the position has been advanced to the
     * limit by the time the future completes; on failure it is left where it was and the contents between
     * position and limit are undefined. Completes only when the whole range has arrived (holes are
     * zero-filled). The buffer must not be touched until the future completes; after that, nothing more is
     * written into it.
     */
    public CompletableFuture<Void> read(long offset, ByteBuffer dst) {
        int length = dst.remaining();
        checkRange("read", offset, length);
        if (length == 0) return CompletableFuture.completedFuture(null);
        if (cache != null) {
            int end = dst.limit();
            return cache.read(offset, dst).thenApply(v -> {
                dst.position(end);
                return null;
            });
        }
        return read(offset, dst, true);
    }

    /** A read that leaves the buffer's position alone, for the cache's own page buffers. */
    CompletableFuture<Void> readUncached(long offset, ByteBuffer dst) {
        return read(offset, dst, false);
    }

    private CompletableFuture<Void> read(long offset, ByteBuffer dst, boolean advance) {
        int length = dst.remaining();
        int base = dst.position();
        List<CompletableFuture<Object>> parts = new ArrayList<>();
        for (long done = 0; done < length; ) {
            int n = (int) Math.min(maxRequest, length - done);
            parts.add(pick(n).submit(Nbd.CMD_READ, 0, offset + done, n, dst.slice(base + (int) done, n)));
            done += n;
        }
        return all(parts, advance ? dst : null, base + length);
    }

    /**
     * Reads {@code length} bytes at {@code offset}, handing the data to {@code sink} chunk by chunk as it
     * arrives instead of placing it into a buffer (see {@link ReadSink}). The future completes once every
     * chunk of the reply has been handed over; the sink is not called after that.
     */
    public CompletableFuture<Void> read(long offset, long length, ReadSink sink) {
        checkRange("read", offset, length);
        if (length == 0) return CompletableFuture.completedFuture(null);
        List<CompletableFuture<Object>> parts = new ArrayList<>();
        for (long done = 0; done < length; ) {
            long n = Math.min(maxRequest, length - done);
            parts.add(pick(n).submitRead(offset + done, n, sink));
            done += n;
        }
        return all(parts);
    }

    /**
     * Whether a {@link ReadSink.Payload} of this client's reads can be spliced into {@code dst}: both are plain
     * (not TLS) connections whose sockets this process may splice, and they are different clients (a client
     * splicing into itself could wait on its own replies).
     */
    public boolean canSpliceTo(NbdClient dst) {
        return dst != this && !dst.info.readOnly() && dst.cache == null
            && connections.stream().allMatch(Lane::spliceable)
            && dst.connections.stream().allMatch(Lane::spliceable);
    }

    /** Whether a write of {@code length} bytes at {@code offset} goes to the server as one request. */
    public boolean canWriteInOne(long offset, long length) {
        long min = info.minimumBlockSize();
        return !info.readOnly() && offset >= 0 && length > 0 && length <= maxRequest && offset <= info.size() - length
            && offset % min == 0 && (length % min == 0 || offset + length == info.size());
    }

    /** The destination side of {@link ReadSink.Payload#spliceTo}: one WRITE, its payload put into the socket by {@code streamer}. */
    CompletableFuture<Void> writeSpliced(long offset, long length, Sender.Streamer streamer) throws IOException {
        if (!canWriteInOne(offset, length)) {
            throw new IllegalArgumentException("write of " + length + " bytes at offset " + offset
                + " does not fit one request to " + uri);
        }
        invalidate(offset, length);
        Lane c = pick(length);
        CompletableFuture<Object> f = c.writeNow(0, offset, length, streamer);
        if (f == null) {
            throw new NbdConnectionException("could not pass " + length + " bytes on to " + uri + ": "
                + (c.alive() ? "no request slot came free in time" : "the connection is lost"), null);
        }
        return all(List.of(f));
    }

    /**
     * Writes {@code src.remaining()} bytes from its position at {@code offset}. On success the position has
     * been advanced to the limit by the time the future completes; on failure it is left where it was. The
     * buffer must not be modified until the future completes. With {@code fua} the data is on stable storage
     * when the future completes (by FUA, or a flush when the server has no FUA).
     */
    public CompletableFuture<Void> write(long offset, ByteBuffer src, boolean fua) {
        int length = src.remaining();
        checkRange("write", offset, length);
        if (info.readOnly()) return failedReadOnly("write");
        if (length == 0) return CompletableFuture.completedFuture(null);
        int flags = fua && info.canFua() ? Nbd.CMD_FLAG_FUA : 0;
        int base = src.position();
        invalidate(offset, length);
        List<CompletableFuture<Object>> parts = new ArrayList<>();
        for (long done = 0; done < length; ) {
            int n = (int) Math.min(maxRequest, length - done);
            parts.add(pick(n).submit(Nbd.CMD_WRITE, flags, offset + done, n, src.slice(base + (int) done, n)));
            done += n;
        }
        boolean flushAfter = fua && !info.canFua();
        if (!flushAfter) return afterWrite(all(parts, src, base + length), offset, length, false);
        return afterWrite(all(parts), offset, length, true).thenApply(v -> {
            src.position(base + length);
            return null;
        });
    }

    /**
     * Writes {@code length} bytes of {@code src}, from {@code position}, at {@code offset}. Over a plain
     * connection the kernel sends them from the page cache (sendfile): they never pass through this process,
     * which saves the two copies a read into a buffer and a write from it make. Over TLS they are read and
     * encrypted a piece at a time. A range past the file's end is refused at once; the file must keep the range
     * until the future completes: were it cut short meanwhile, the request fails and so does its connection
     * (the server is owed bytes that cannot be sent).
     * With {@code fua}, as {@link #write(long, ByteBuffer, boolean)}.
     */
    public CompletableFuture<Void> write(long offset, FileChannel src, long position, long length, boolean fua) {
        checkRange("write", offset, length);
        if (position < 0) throw new IllegalArgumentException("file position " + position + " is negative");
        try {
            if (position + length > src.size()) {
                throw new IllegalArgumentException("write of " + length + " bytes from file position " + position
                    + " reaches past the end of the file (" + src.size() + " bytes)");
            }
        } catch (IOException e) {
            return CompletableFuture.failedFuture(e);
        }
        if (info.readOnly()) return failedReadOnly("write");
        if (length == 0) return CompletableFuture.completedFuture(null);
        int flags = fua && info.canFua() ? Nbd.CMD_FLAG_FUA : 0;
        invalidate(offset, length);
        List<CompletableFuture<Object>> parts = new ArrayList<>();
        for (long done = 0; done < length; ) {
            long n = Math.min(maxRequest, length - done);
            parts.add(pick(n).submitWrite(flags, offset + done, n, new Pending.FileRegion(src, position + done)));
            done += n;
        }
        return afterWrite(all(parts), offset, length, fua && !info.canFua());
    }

    /** Makes every completed write durable. A no-op when the server does not offer FLUSH. */
    public CompletableFuture<Void> flush() {
        if (!info.canFlush()) return CompletableFuture.completedFuture(null);
        // With CAN_MULTI_CONN a flush on one connection covers writes completed on all of them.
        return all(List.of(pick(0).submit(Nbd.CMD_FLUSH, 0, 0, 0, null)));
    }

    /** Tells the server the range is no longer needed. A hint: a no-op when the server does not offer TRIM. */
    public CompletableFuture<Void> trim(long offset, long length, boolean fua) {
        checkRange("trim", offset, length);
        if (info.readOnly()) return failedReadOnly("trim");
        if (!info.canTrim() || length == 0) return CompletableFuture.completedFuture(null);
        invalidate(offset, length);
        int flags = fua && info.canFua() ? Nbd.CMD_FLAG_FUA : 0;
        return afterWrite(split(Nbd.CMD_TRIM, flags, offset, length), offset, length, fua && !info.canFua());
    }

    /**
     * Makes the range read as zeroes. {@code noHole} asks the server to keep it allocated; {@code fastZero}
     * asks it to fail with ENOTSUP rather than zero slowly (it also fails so if the server cannot promise
     * fast zeroing). When the server lacks WRITE_ZEROES, zeroes are written with ordinary writes.
     */
    public CompletableFuture<Void> writeZeroes(long offset, long length, boolean noHole, boolean fastZero, boolean fua) {
        checkRange("write zeroes", offset, length);
        if (info.readOnly()) return failedReadOnly("write zeroes");
        if (length == 0) return CompletableFuture.completedFuture(null);
        if (!info.canWriteZeroes() || (fastZero && !info.canFastZero())) {
            if (fastZero) {
                return CompletableFuture.failedFuture(new NbdErrorException(Nbd.ENOTSUP,
                    "WRITE_ZEROES(offset=" + offset + ", length=" + length + ", FAST_ZERO)", "server cannot zero fast"));
            }
            return writeZeroBuffers(offset, length, fua);
        }
        invalidate(offset, length);
        int flags = (noHole ? Nbd.CMD_FLAG_NO_HOLE : 0) | (fastZero ? Nbd.CMD_FLAG_FAST_ZERO : 0)
            | (fua && info.canFua() ? Nbd.CMD_FLAG_FUA : 0);
        return afterWrite(split(Nbd.CMD_WRITE_ZEROES, flags, offset, length), offset, length, fua && !info.canFua());
    }

    private CompletableFuture<Void> writeZeroBuffers(long offset, long length, boolean fua) {
        ByteBuffer z = zeroes;
        if (z == null) zeroes = z = ByteBuffer.allocateDirect((int) Math.min(maxRequest, 1 << 20));
        List<CompletableFuture<Void>> parts = new ArrayList<>();
        for (long done = 0; done < length; ) {
            int n = (int) Math.min(z.capacity(), length - done);
            parts.add(write(offset + done, z.slice(0, n), fua));
            done += n;
        }
        return CompletableFuture.allOf(parts.toArray(CompletableFuture[]::new));
    }

    /** Asks the server to prefetch the range into its own cache. A hint: a no-op without CACHE. */
    public CompletableFuture<Void> cache(long offset, long length) {
        checkRange("cache", offset, length);
        if (!info.canCache() || length == 0) return CompletableFuture.completedFuture(null);
        return split(Nbd.CMD_CACHE, 0, offset, length);
    }

    /**
     * One {@code NBD_CMD_BLOCK_STATUS} request for {@code base:allocation}: the extents the server reports from
     * {@code offset}, clipped to the range; the server may describe less than the whole range (use
     * {@link #extents} to cover all of it). Without base:allocation the whole range is reported as data.
     */
    public CompletableFuture<List<Extent>> blockStatus(long offset, long length) {
        checkRange("block status", offset, length);
        if (length == 0) return CompletableFuture.completedFuture(List.of());
        if (!info.baseAllocation()) return CompletableFuture.completedFuture(List.of(new Extent(offset, length, 0)));
        return statusOf(Nbd.CONTEXT_BASE_ALLOCATION, offset, length)
            .thenApply(list -> list.stream().map(e -> new Extent(e.offset(), e.length(), e.flags())).toList());
    }

    /** Block status of the whole range, asking as many times as the server needs to describe it all. */
    public CompletableFuture<List<Extent>> extents(long offset, long length) {
        return StatusWalk.walk(offset, length, (at, n) -> blockStatus(at, n), Extent::end);
    }

    /**
     * One {@code NBD_CMD_BLOCK_STATUS} request, answered from the chunk of metadata context {@code context}
     * (for example {@code qemu:dirty-bitmap:b0}, asked for with {@link ClientOptions#withMetaContexts}): the
     * extents the server reports from {@code offset} with the context's raw flags, clipped to the range; the server
     * may describe less than the whole range (use {@link #metaExtents} to cover all of it). The server answers every
     * block status request for every negotiated context; the others' chunks are dropped here.
     *
     * @throws IllegalArgumentException if {@code context} was not negotiated; the message names those that were
     */
    public CompletableFuture<List<MetaExtent>> blockStatus(String context, long offset, long length) {
        checkRange("block status", offset, length);
        requireNegotiated(context);
        if (length == 0) return CompletableFuture.completedFuture(List.of());
        return statusOf(context, offset, length);
    }

    /** {@link #blockStatus(String, long, long)} of the whole range, asking as many times as the server needs. */
    public CompletableFuture<List<MetaExtent>> metaExtents(String context, long offset, long length) {
        requireNegotiated(context);
        return StatusWalk.walk(offset, length, (at, n) -> blockStatus(context, at, n), MetaExtent::end);
    }

    /**
     * The metadata contexts negotiated on connecting, in the server's order: {@code base:allocation} if the server
     * offers it, and those of {@link ClientOptions#withMetaContexts} it offers. Empty without structured replies.
     */
    public List<String> metaContexts() {
        return connections.getFirst().metaContexts();
    }

    private void requireNegotiated(String context) {
        List<String> negotiated = metaContexts();
        if (!negotiated.contains(context)) {
            throw new IllegalArgumentException("metadata context '" + context + "' was not negotiated with " + uri
                + (negotiated.isEmpty() ? "; none was" : "; these were: " + String.join(", ", negotiated)));
        }
    }

    private CompletableFuture<List<MetaExtent>> statusOf(String context, long offset, long length) {
        long n = alignUp(Math.min(length, MAX_EFFECT_LENGTH));
        if (offset + n > info.size()) n = info.size() - offset;
        long asked = n;
        return pick(0).submit(Nbd.CMD_BLOCK_STATUS, 0, offset, asked, null).thenApply(result -> {
            @SuppressWarnings("unchecked") var byContext = (java.util.Map<String, List<MetaExtent>>) result;
            List<MetaExtent> list = byContext.get(context);
            if (list == null) {
                throw new java.util.concurrent.CompletionException(new NbdProtocolException("reply to block status of "
                    + asked + " bytes at offset " + offset + " from " + uri + " has no chunk for context '" + context + "'"));
            }
            List<MetaExtent> clipped = new ArrayList<>(list.size());
            for (MetaExtent e : list) {
                if (e.offset() >= offset + length) break;
                clipped.add(new MetaExtent(e.offset(), Math.min(e.length(), offset + length - e.offset()), e.flags()));
            }
            return clipped;
        });
    }

    /** Waits for requests in flight (up to the request timeout), disconnects politely and closes every connection. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) return;
        long grace = options.requestTimeout().isZero() ? 10_000 : options.requestTimeout().toMillis();
        for (Lane c : connections) c.close(grace);
        Connector.stopTimer(timer);
    }

    // ---- helpers ----

    /** Whether the calling thread holds a lock of this client (a sender's, a connection's, the cache's): for tests. */
    boolean lockedByCurrentThread() {
        return connections.stream().anyMatch(Lane::lockedByCurrentThread) || (cache != null && Thread.holdsLock(cache));
    }

    /** Requests in flight or queued on each connection, in order: for tests. */
    int[] loads() {
        return connections.stream().mapToInt(Lane::load).toArray();
    }

    /** Requests a reconnecting client sent on a new connection after waiting for it: for tests. */
    long resent() {
        return connections.stream().mapToLong(c -> c instanceof Redial r ? r.resent() : 0).sum();
    }

    /** Tasks queued on the timer, cancelled ones included: for tests. */
    int timerTasks() {
        return ((ScheduledThreadPoolExecutor) timer).getQueue().size();
    }

    /**
     * The connection for a request moving {@code bytes} of data. Small requests stay on the connection the last
     * one went to until it has half its window in flight, and only then go to the least busy one: requests that
     * arrive together then leave in one write and their replies come back in one read, where spread one by one
     * over every connection each woke a sender and a reader of its own. At 4k QD32 through the nbd: proxy, four
     * connections used in turn cost 0.7 writes, 0.7 reads and 2.1 futex calls per request, one connection 0.14,
     * 0.13 and 0.36. Large requests are spread: their cost is the copying, which the readers then share.
     */
    private Lane pick(long bytes) {
        if (connections.size() == 1) return connections.getFirst();
        boolean small = bytes <= STICKY_MAX_BYTES;
        Lane last = recent;
        if (small && last != null && last.alive() && last.load() < stickyLoad) return last;
        Lane best = connections.getFirst();
        for (Lane c : connections) {
            if (c.alive() && (!best.alive() || c.load() < best.load())) best = c;
        }
        if (small) recent = best;
        return best;
    }

    private CompletableFuture<Void> split(int type, int flags, long offset, long length) {
        long step = Math.max(info.minimumBlockSize(), MAX_EFFECT_LENGTH / info.minimumBlockSize() * info.minimumBlockSize());
        List<CompletableFuture<Object>> parts = new ArrayList<>();
        for (long done = 0; done < length; ) {
            long n = Math.min(step, length - done);
            parts.add(pick(0).submit(type, flags, offset + done, n, null));
            done += n;
        }
        return all(parts);
    }

    private CompletableFuture<Void> afterWrite(CompletableFuture<Void> f, long offset, long length, boolean flushAfter) {
        CompletableFuture<Void> done = f.whenComplete((v, e) -> invalidate(offset, length));
        return flushAfter ? done.thenCompose(v -> flush()) : done;
    }

    private void invalidate(long offset, long length) {
        if (cache != null) cache.invalidate(offset, length);
    }

    /**
     * Completes when every part has, failing with the first failure. It waits for the parts still running even
     * after one has failed: until they end, they may still place data into the caller's buffer (or send from
     * it), and the caller, once told, may reuse it.
     */
    private static CompletableFuture<Void> all(List<CompletableFuture<Object>> parts) {
        return all(parts, null, 0);
    }

    /** As {@link #all(List)}, and on success first moves {@code advance}'s position (unless null) to {@code end}. */
    private static CompletableFuture<Void> all(List<CompletableFuture<Object>> parts, ByteBuffer advance, int end) {
        if (parts.size() == 1) {
            return parts.getFirst().thenApply(x -> {
                if (advance != null) advance.position(end);
                return null;
            });
        }
        java.util.concurrent.atomic.AtomicReference<Throwable> first = new java.util.concurrent.atomic.AtomicReference<>();
        for (var p : parts) p.whenComplete((v, e) -> { if (e != null) first.compareAndSet(null, unwrap(e)); });
        CompletableFuture<Void> result = new CompletableFuture<>();
        CompletableFuture.allOf(parts.toArray(CompletableFuture[]::new)).whenComplete((v, e) -> {
            if (e == null) {
                if (advance != null) advance.position(end);
                result.complete(null);
            } else {
                Throwable t = first.get();
                result.completeExceptionally(t != null ? t : unwrap(e));
            }
        });
        return result;
    }

    static Throwable unwrap(Throwable e) {
        while (e instanceof java.util.concurrent.CompletionException && e.getCause() != null) e = e.getCause();
        return e;
    }

    private CompletableFuture<Void> failedReadOnly(String what) {
        return CompletableFuture.failedFuture(new NbdException("cannot " + what + ": export '" + info.name()
            + "' on " + uri + " is read-only"));
    }

    private long alignUp(long n) {
        long min = info.minimumBlockSize();
        return (n + min - 1) / min * min;
    }

    private void checkRange(String what, long offset, long length) {
        if (closed.get()) throw new IllegalStateException(new ClosedChannelException());
        if (offset < 0 || length < 0 || offset > info.size() || length > info.size() - offset) {
            throw new IllegalArgumentException(what + " of " + length + " bytes at offset " + offset
                + " is outside the export (size " + info.size() + ")");
        }
        long min = info.minimumBlockSize();
        boolean endsAtSize = offset + length == info.size();
        if (offset % min != 0 || (length % min != 0 && !endsAtSize)) {
            throw new IllegalArgumentException(what + " of " + length + " bytes at offset " + offset
                + " is not aligned to the server's minimum block size " + min);
        }
    }
}
