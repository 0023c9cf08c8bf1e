package io.jnbd.server.filter;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.function.LongSupplier;
import java.util.function.Supplier;

/**
 * Limits the bandwidth of reads and writes, as nbdkit's rate filter does: a token bucket for the whole export
 * ({@code rate=}) and one for each connection ({@code connection-rate=}), reads and writes each in buckets of their
 * own, counting the bits of the data they carry; every other request passes free (a zero or a trim moves no data on
 * the wire). A request passes once every bucket it meets has let it through. Synchronous calls sleep on the thread
 * that made them; asynchronous ones start the inner call when the buckets allow, holding no thread meanwhile.
 *
 * <p>The connection buckets are the filter's state of each connection: {@link #forConnection} gives each connection a
 * copy of this filter with buckets of its own, sharing the export's.
 */
public final class RateFilter extends FilterBackend {
    /** Starts the waiting asynchronous calls: a thread of their own, so a slow start delays nothing else. */

    /** What every connection of the export shares. {@code perConnection} is null without a connection limit. */
    record Limits(RateSource export, RateSource perConnection, double burstiness, LongSupplier clock,
                  TokenBucket reads, TokenBucket writes, String description) {

        static Limits of(RateSource export, RateSource perConnection, double burstiness, LongSupplier clock, String description) {
            long now = clock.getAsLong();
            return new Limits(export, perConnection, burstiness, clock, new TokenBucket(export.rate(now), burstiness, now),
                new TokenBucket(export.rate(now), burstiness, now), description);
        }
    }

    private final Limits limits;
    /** This connection's buckets, or null without a connection limit. */
    private final TokenBucket connectionReads, connectionWrites;
    private final Set<Trait> traits;

    RateFilter(Backend inner, Limits limits) {
        super(inner);
        this.limits = limits;
        if (limits.perConnection() != null) {
            long now = limits.clock().getAsLong();
            long rate = limits.perConnection().rate(now);
            connectionReads = new TokenBucket(rate, limits.burstiness(), now);
            connectionWrites = new TokenBucket(rate, limits.burstiness(), now);
        } else {
            connectionReads = connectionWrites = null;
        }
        this.traits = Traits.throughEveryCall(inner.traits());
    }

    /** With a connection limit, a filter with fresh connection buckets over the inner's view; else as any filter. */
    @Override
    public Backend forConnection(io.jnbd.server.backend.ConnectionContext connection) {
        if (limits.perConnection() == null) return super.forConnection(connection);
        return new RateFilter(inner.forConnection(connection), limits);
    }

    @Override public Set<Trait> traits() { return traits; }

    @Override public String describe() { return limits.description() + " -> " + inner.describe(); }

    /** The bytes of every read that passed the filter, on any connection (the export's read bucket counts them). */
    public long bytesRead() {
        return limits.reads().bitsTaken() / 8;
    }

    /** The bytes of every write that passed the filter, on any connection. */
    public long bytesWritten() {
        return limits.writes().bitsTaken() / 8;
    }

    /** Takes a read of {@code bytes} from the buckets; the nanoseconds it waits. */
    long takeRead(long bytes) {
        return take(limits.reads(), connectionReads, bytes);
    }

    /** Takes a write of {@code bytes} from the buckets; the nanoseconds it waits. */
    long takeWrite(long bytes) {
        return take(limits.writes(), connectionWrites, bytes);
    }

    /** Takes {@code bytes} from the export's bucket and this connection's; the nanoseconds until both let them pass. */
    private long take(TokenBucket exportWide, TokenBucket connection, long bytes) {
        long bits = bytes * 8;
        long now = limits.clock().getAsLong();
        long wait = exportWide.take(bits, limits.export().rate(now), now);
        if (connection != null) wait = Math.max(wait, connection.take(bits, limits.perConnection().rate(now), now));
        return wait;
    }

    private static void sleep(long nanos) throws IOException {
        Waits.sleep(nanos, "rate");
    }

    private static <T> CompletableFuture<T> later(long nanos, Supplier<CompletableFuture<T>> call) {
        return Waits.after(nanos, call);
    }

    @Override
    public void read(long offset, ByteBuffer dst) throws IOException {
        sleep(takeRead(dst.remaining()));
        inner.read(offset, dst);
    }

    @Override
    public CompletableFuture<Void> readAsync(long offset, ByteBuffer dst) {
        return later(takeRead(dst.remaining()), () -> inner.readAsync(offset, dst));
    }

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        sleep(takeWrite(src.remaining()));
        inner.write(offset, src, fua);
    }

    @Override
    public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        sleep(takeWrite(Waits.length(srcs)));
        inner.write(offset, srcs, fua);
    }

    @Override
    public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
        return later(takeWrite(Waits.length(srcs)), () -> inner.writeAsync(offset, srcs, fua));
    }
}
