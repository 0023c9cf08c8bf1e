package io.jnbd.server.filter;

import io.jnbd.server.backend.MemoryBackend;
import java.nio.ByteBuffer;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;

/** A memory backend that also answers asynchronously, as the pool does, and counts the asynchronous calls it got. */
public final class AsyncMemory extends io.jnbd.server.backend.FilterBackend {
    public final AtomicInteger asyncCalls = new AtomicInteger();

    public AsyncMemory(long size) {
        super(new MemoryBackend(size));
    }

    @Override
    public Set<Trait> traits() {
        return Set.of(Trait.ASYNC, Trait.DIRECT_IO, Trait.ZERO_COPY, Trait.NEVER_BLOCKS);
    }

    @Override
    public CompletableFuture<Void> readAsync(long offset, ByteBuffer dst) {
        asyncCalls.incrementAndGet();
        return CompletableFuture.runAsync(() -> {
            try {
                inner.read(offset, dst);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        });
    }

    @Override
    public CompletableFuture<Void> writeAsync(long offset, ByteBuffer[] srcs, boolean fua) {
        asyncCalls.incrementAndGet();
        return CompletableFuture.runAsync(() -> {
            try {
                inner.write(offset, srcs, fua);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        });
    }
}
