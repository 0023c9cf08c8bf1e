package io.jnbd.server.backend;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Set;
import io.jnbd.server.io.PageCacheSource;
import java.util.concurrent.CompletableFuture;

/**
 * The storage behind one export. Files, memory and the pool implement it; filters wrap it.
 *
 * <p>Every request reaching a backend has already been validated at the protocol edge: ranges lie
 * inside {@link #size()}, write operations are only sent when {@link Capability#WRITE} is offered,
 * and so on. Backends therefore check nothing but what only they can know (a filesystem that cannot
 * punch holes, a fast zero that would be slow). Methods may be called concurrently.
 */
public interface Backend extends AutoCloseable {

    /** What a backend offers; each maps to a transmission flag. */
    enum Capability { WRITE, FLUSH, FUA, TRIM, ZERO, FAST_ZERO, CACHE, EXTENTS, MULTI_CONN }

    /**
     * How a backend moves data, which decides the server's data path for its requests. A backend declares
     * them; a filter passes on only those that stay true through it (one that changes the bytes must not pass
     * on {@link #ZERO_COPY}, one that waits must not pass on {@link #NEVER_BLOCKS}).
     */
    enum Trait {
        /** Reads may go from {@link #pageCache()} straight to the socket (sendfile). */
        ZERO_COPY,
        /** No call ever waits for a device (memory): requests run on the connection's own thread. */
        NEVER_BLOCKS,
        /** Data moves by O_DIRECT: buffers on huge pages pay, and large writes are split as they arrive. */
        DIRECT_IO,
        /** Calls wait on other machines: they run on virtual threads, so a slow peer holds no platform thread. */
        REMOTE,
        /**
         * Reads and writes can be started without waiting ({@link #readAsync}, {@link #writeAsync}): the server
         * starts them on the connection's own thread and replies when they complete, holding no thread meanwhile.
         */
        ASYNC,
        /**
         * {@link #readIfCached} can answer a read from memory the machine already holds (the page cache) without
         * waiting: the server tries it on the connection's own thread before handing a small read to an I/O thread.
         */
        CACHED_READS
    }

    long size();

    Set<Capability> capabilities();

    default boolean can(Capability c) {
        return capabilities().contains(c);
    }

    /** Block size constraints advertised in {@code NBD_INFO_BLOCK_SIZE}. */
    default BlockSizes blockSizes() {
        return BlockSizes.DEFAULT;
    }

    /** Fills {@code dst} from its position to its limit with the bytes at {@code offset}. */
    void read(long offset, ByteBuffer dst) throws IOException;

    /** The traits of this backend's data path; none by default. */
    default Set<Trait> traits() {
        return Set.of();
    }

    default boolean has(Trait t) {
        return traits().contains(t);
    }

    /**
     * With {@link Trait#ZERO_COPY}: a file whose bytes at the same offsets are the export's, for sending reads from
     * the page cache straight to the socket (sendfile) or reading them on the connection's thread; null without.
     */
    default PageCacheSource pageCache() {
        return null;
    }

    /**
     * With {@link Trait#CACHED_READS}: fills {@code dst} (a direct buffer, position to limit) with the export's bytes
     * at {@code offset}, its position then at its limit, and returns true only if that needs no wait (every byte is in the
     * page cache); otherwise
     * returns false having waited for nothing, {@code dst}'s position unchanged and its bytes undefined. Cheap enough to
     * be tried on the connection's thread before every small read; without the trait, never asked.
     */
    default boolean readIfCached(long offset, ByteBuffer dst) throws IOException {
        return false;
    }

    /** Writes {@code src} from its position to its limit at {@code offset}; durable before return if {@code fua}. */
    void write(long offset, ByteBuffer src, boolean fua) throws IOException;

    /**
     * Writes the buffers one after another from {@code offset}, as one operation where the backend can
     * (the sorted scheduler merges adjacent writes into such a call).
     */
    default void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        long pos = offset;
        for (ByteBuffer b : srcs) {
            int n = b.remaining();
            write(pos, b, false);
            pos += n;
        }
        if (fua) flush();
    }

    /**
     * With {@link Trait#ASYNC}: starts filling {@code dst} from its position to its limit with the bytes at
     * {@code offset}, and completes when it is full (or failed, with an exception {@link NbdErrors} maps). The
     * buffer's position afterwards is unspecified.
     */
    default CompletableFuture<Void> readAsync(long offset, ByteBuffer dst) {
        return CompletableFuture.failedFuture(new UnsupportedOperationException(describe() + " has no asynchronous reads"));
    }

    /** With {@link Trait#ASYNC}: starts writing the buffers one after another from {@code offset}. */
    default CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
        return CompletableFuture.failedFuture(new UnsupportedOperationException(describe() + " has no asynchronous writes"));
    }

    /**
     * The server is about to start several requests it read from one client together, and calls
     * {@link #endBatch} on the same thread once it has started them (always paired). A backend that forwards
     * requests elsewhere may hold them back meanwhile and send them together; it must still send what it holds
     * before it blocks waiting for any of them.
     */
    default void beginBatch() {
    }

    /** See {@link #beginBatch}. */
    default void endBatch() {
    }

    /** Makes every completed write durable, whichever connection made it. */
    void flush() throws IOException;

    /** Discards a range; later reads may return old data or zeroes. */
    void trim(long offset, long length, boolean fua) throws IOException;

    /**
     * Makes a range read as zeroes. {@code mayTrim}: the range may become a hole. {@code fast}: fail with
     * {@code ENOTSUP} rather than be slower than writing zeroes.
     */
    void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException;

    /** A hint that the range will be read soon. */
    default void cache(long offset, long length) throws IOException {}

    /**
     * The allocation status of a range from {@code offset}, as consecutive extents covering at least one
     * byte and at most {@code length} bytes.
     */
    default List<Extent> extents(long offset, long length) throws IOException {
        return List.of(new Extent(length, false, false));
    }

    /**
     * The metadata contexts this backend answers besides {@code base:allocation}, by full name
     * ({@code qemu:dirty-bitmap:b0}). Asked at every {@code NBD_OPT_LIST_META_CONTEXT} and
     * {@code NBD_OPT_SET_META_CONTEXT}, so the answer may change while the server runs (an operator adds a bitmap).
     */
    default List<String> metaContexts() {
        return List.of();
    }

    /**
     * What stays the same for as long as this export's data does, in hex, or null to claim nothing: a reconnecting
     * client compares it across a server's restart (listed as the metadata context {@code jnbd:identity:<hex>}) to
     * know it came back to the same data. A file's device and inode; a fresh random value for storage whose data
     * ends with the process (memory), so that a restarted one counts as another export.
     */
    default String identity() {
        return null;
    }

    /**
     * The status of a range from {@code offset} in one of {@link #metaContexts()}, as consecutive extents covering at
     * least one byte and at most {@code length} bytes. A context this backend does not (or no longer) answer fails
     * with {@link NbdErrorException} {@code EINVAL}.
     */
    default List<MetaExtent> metaExtents(String context, long offset, long length) throws IOException {
        throw new NbdErrorException(io.jnbd.protocol.Nbd.EINVAL, "no metadata context " + context);
    }

    /**
     * The backend one client connection sends its requests to, asked once when its transmission phase begins: this
     * backend itself unless something in the chain keeps state of each connection (the rate filter's
     * {@code connection-rate=} bucket). A view shares everything of the export but that state, and its
     * {@link #traits()} and {@link #pageCache()} are the export's: the server chooses the connection's data path from
     * the export's chain and sends the requests to the view. A view is never closed; {@link #connectionClosed} ends it.
     * {@code context} says who the connection is: the name it asked for after the export's (see {@link NamedViews}),
     * its TLS identities, its peer.
     */
    default Backend forConnection(ConnectionContext context) {
        return this;
    }

    /**
     * Called once on what {@link #forConnection} returned when that connection has ended, however it ended (the
     * client left, an error, the server stopping), after the requests it sent have been answered or abandoned: a
     * filter frees what it kept for the connection. On server stop it may come after the export's {@link #close}, so
     * it must not need the backend open.
     */
    default void connectionClosed() {}

    /** A short description for logs, e.g. {@code file:/var/lib/vm.img (cached)}. */
    String describe();

    @Override
    void close() throws IOException;
}
