package io.jnbd.client;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

/**
 * The blocking face of an {@link NbdClient}: each method sends its request(s) and waits for the reply,
 * throwing the same {@link NbdException}s the futures fail with. Obtain it with {@link NbdClient#blocking()}.
 *
 * <pre>{@code
 * BlockingNbdClient disk = client.blocking();
 * ByteBuffer buf = ByteBuffer.allocateDirect(65536);
 * disk.read(0, buf);
 * }</pre>
 */
public final class BlockingNbdClient {
    private final NbdClient client;

    BlockingNbdClient(NbdClient client) {
        this.client = client;
    }

    public NbdClient async() {
        return client;
    }

    public long size() {
        return client.size();
    }

    /**
     * Fills {@code dst} from its position to its limit and advances its position to the limit; on failure
     * the position is left where it was. See {@link NbdClient#read}.
     */
    public void read(long offset, ByteBuffer dst) throws IOException {
        await(client.read(offset, dst));
    }

    /**
     * Writes {@code src} from its position to its limit and advances its position to the limit; on failure
     * the position is left where it was. See {@link NbdClient#write}.
     */
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        await(client.write(offset, src, fua));
    }

    public void flush() throws IOException {
        await(client.flush());
    }

    public void trim(long offset, long length, boolean fua) throws IOException {
        await(client.trim(offset, length, fua));
    }

    public void writeZeroes(long offset, long length, boolean noHole, boolean fastZero, boolean fua) throws IOException {
        await(client.writeZeroes(offset, length, noHole, fastZero, fua));
    }

    public void cache(long offset, long length) throws IOException {
        await(client.cache(offset, length));
    }

    public List<Extent> blockStatus(long offset, long length) throws IOException {
        return await(client.blockStatus(offset, length));
    }

    public List<Extent> extents(long offset, long length) throws IOException {
        return await(client.extents(offset, length));
    }

    /** See {@link NbdClient#blockStatus(String, long, long)}; a context not negotiated is an IllegalArgumentException. */
    public List<MetaExtent> blockStatus(String context, long offset, long length) throws IOException {
        return await(client.blockStatus(context, offset, length));
    }

    public List<MetaExtent> metaExtents(String context, long offset, long length) throws IOException {
        return await(client.metaExtents(context, offset, length));
    }

    public List<String> metaContexts() {
        return client.metaContexts();
    }

    static <T> T await(CompletableFuture<T> f) throws IOException {
        try {
            return f.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while waiting for the server");
        } catch (ExecutionException e) {
            Throwable cause = NbdClient.unwrap(e.getCause());
            if (cause instanceof IOException io) throw io;
            if (cause instanceof RuntimeException re) throw re;
            throw new NbdException(String.valueOf(cause), cause);
        }
    }
}
