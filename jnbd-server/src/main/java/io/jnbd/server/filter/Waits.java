package io.jnbd.server.filter;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.NbdErrorException;
import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/** How the filters that hold a call back (delay, rate) wait: one way for every filter, synchronous or not. */
final class Waits {
    /** Starts the held-back asynchronous calls: a thread of their own, so a slow start delays nothing else. */
    private static final Executor START = r -> Thread.ofVirtual().name("jnbd-filter-wait").start(r);

    private Waits() {}

    /** Sleeps {@code nanos} on this thread; a stopping server's interrupt is {@code ESHUTDOWN}, naming {@code filter}. */
    static void sleep(long nanos, String filter) throws NbdErrorException {
        if (nanos <= 0) return;
        try {
            Thread.sleep(nanos / 1_000_000, (int) (nanos % 1_000_000));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new NbdErrorException(Nbd.ESHUTDOWN, "interrupted in the " + filter + " filter: the server is stopping");
        }
    }

    /** Starts {@code call} once {@code nanos} have passed, holding no thread meanwhile; at once for none. */
    static <T> CompletableFuture<T> after(long nanos, Supplier<CompletableFuture<T>> call) {
        if (nanos <= 0) return call.get();
        return CompletableFuture.runAsync(() -> {}, CompletableFuture.delayedExecutor(nanos, TimeUnit.NANOSECONDS, START))
            .thenCompose(ignored -> call.get());
    }

    /** The bytes of a gathered write. */
    static long length(ByteBuffer[] srcs) {
        long n = 0;
        for (ByteBuffer b : srcs) n += b.remaining();
        return n;
    }
}
