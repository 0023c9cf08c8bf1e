package io.jnbd.server.filter;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.NbdErrorException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.EnumMap;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.function.Supplier;

/**
 * Waits before passing a call down, each command for its own delay: a slow or distant disk for tests. Synchronous
 * calls sleep on the thread that made them; asynchronous ones start the inner call once the delay has passed, on a
 * virtual thread, holding no thread meanwhile.
 */
final class DelayFilter extends FilterBackend {
    private final EnumMap<Command, Long> nanos;
    private final boolean fastZeroFails;
    private final String description;
    private final Set<Trait> traits;

    DelayFilter(Backend inner, EnumMap<Command, Long> nanos, boolean fastZeroFails, String description, Set<Trait> traits) {
        super(inner);
        this.nanos = new EnumMap<>(nanos);
        this.fastZeroFails = fastZeroFails;
        this.description = description;
        this.traits = traits;
    }

    @Override public Set<Trait> traits() { return traits; }

    @Override public String describe() { return description + " -> " + inner.describe(); }

    private void pause(Command c) throws IOException {
        Waits.sleep(nanos.get(c), "delay");
    }

    private <T> CompletableFuture<T> later(Command c, Supplier<CompletableFuture<T>> call) {
        return Waits.after(nanos.get(c), call);
    }

    @Override
    public void read(long offset, ByteBuffer dst) throws IOException {
        pause(Command.READ);
        inner.read(offset, dst);
    }

    @Override
    public CompletableFuture<Void> readAsync(long offset, ByteBuffer dst) {
        return later(Command.READ, () -> inner.readAsync(offset, dst));
    }

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        pause(Command.WRITE);
        inner.write(offset, src, fua);
    }

    @Override
    public void write(long offset, ByteBuffer[] srcs, boolean fua) throws IOException {
        pause(Command.WRITE);
        inner.write(offset, srcs, fua);
    }

    @Override
    public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
        return later(Command.WRITE, () -> inner.writeAsync(offset, srcs, fua));
    }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        if (fast && fastZeroFails && nanos.get(Command.ZERO) > 0) {
            throw new NbdErrorException(Nbd.ENOTSUP, "zeroes are delayed (delay-zero): a fast zero would not be fast");
        }
        pause(Command.ZERO);
        inner.zero(offset, length, mayTrim, fast, fua);
    }

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        pause(Command.TRIM);
        inner.trim(offset, length, fua);
    }

    @Override
    public void flush() throws IOException {
        pause(Command.FLUSH);
        inner.flush();
    }

    @Override
    public void cache(long offset, long length) throws IOException {
        pause(Command.CACHE);
        inner.cache(offset, length);
    }

    @Override
    public List<io.jnbd.server.backend.Extent> extents(long offset, long length) throws IOException {
        pause(Command.EXTENTS);
        return inner.extents(offset, length);
    }

    /** {@code 5ms}, {@code 1.5s}, {@code 500us}: as short as it stays exact. */
    static String text(long nanos) {
        if (nanos % 1_000_000_000L == 0) return nanos / 1_000_000_000L + "s";
        if (nanos >= 1_000_000_000L) return java.math.BigDecimal.valueOf(nanos, 9).stripTrailingZeros().toPlainString() + "s";
        if (nanos % 1_000_000L == 0) return nanos / 1_000_000L + "ms";
        if (nanos % 1_000L == 0) return nanos / 1_000L + "us";
        return nanos + "ns";
    }
}
