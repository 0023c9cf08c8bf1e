package io.jnbd.client;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.function.ToLongFunction;

/**
 * Block status of a whole range: a server may describe less than it was asked for, so ask again where each answer
 * stopped until the range is covered.
 */
final class StatusWalk {

    private StatusWalk() {
    }

    /** One block status request from {@code offset}; its answer starts there and is never empty. */
    interface Request<T> {
        CompletableFuture<List<T>> ask(long offset, long length);
    }

    static <T> CompletableFuture<List<T>> walk(long offset, long length, Request<T> request, ToLongFunction<T> end) {
        List<T> out = new ArrayList<>();
        return from(offset, offset + length, request, end, out).thenApply(v -> List.copyOf(out));
    }

    private static <T> CompletableFuture<Void> from(long at, long stop, Request<T> request, ToLongFunction<T> end,
                                                    List<T> out) {
        if (at >= stop) return CompletableFuture.completedFuture(null);
        return request.ask(at, stop - at).thenCompose(list -> {
            long next = at;
            for (T e : list) {
                out.add(e);
                next = end.applyAsLong(e);
            }
            return from(next, stop, request, end, out);
        });
    }
}
