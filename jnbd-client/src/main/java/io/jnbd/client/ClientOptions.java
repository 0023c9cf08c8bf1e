package io.jnbd.client;

import java.time.Duration;
import java.util.concurrent.Executor;

/**
 * Settings of an {@link NbdClient}. Start from {@link #defaults()} and change what you need:
 * <pre>{@code
 * ClientOptions opts = ClientOptions.defaults().withConnections(4).withRequestTimeout(Duration.ofSeconds(10));
 * }</pre>
 *
 * @param connections       connections to open; more than one only if the server offers CAN_MULTI_CONN
 * @param requestsInFlight  requests sent and not yet answered per connection; further requests wait in a
 *                          queue (their callers do not) and are sent, in order, as replies free slots
 * @param connectTimeout    bound on connecting plus the whole handshake
 * @param requestTimeout    bound on each request, from submission (including time queued for a slot) to its reply;
 *                          {@link Duration#ZERO} disables it
 * @param structuredReplies ask for structured replies (sparse reads, block status); off forces simple replies
 * @param cacheSize         bytes of client-side read cache; 0 disables the cache and readahead
 * @param readahead         bytes fetched ahead of a sequential reader (only with a cache)
 * @param cachePageSize     granularity of the cache; rounded up to the server's minimum block size
 * @param completionExecutor where futures are completed (and so where callbacks attached without an executor
 *                          run); null for the connection's own threads, mostly its reader thread, which then
 *                          reads no further reply until the callback returns
 */
public record ClientOptions(int connections, int requestsInFlight, Duration connectTimeout, Duration requestTimeout,
                            boolean structuredReplies, long cacheSize, long readahead, int cachePageSize,
                            Executor completionExecutor) {

    public ClientOptions {
        if (connections < 1) throw new IllegalArgumentException("connections must be at least 1");
        if (requestsInFlight < 1) throw new IllegalArgumentException("requestsInFlight must be at least 1");
        if (connectTimeout.isNegative() || connectTimeout.isZero()) {
            throw new IllegalArgumentException("connectTimeout must be positive");
        }
        if (requestTimeout.isNegative()) throw new IllegalArgumentException("requestTimeout must not be negative");
        if (cacheSize < 0 || readahead < 0) throw new IllegalArgumentException("cache sizes must not be negative");
        if (cachePageSize < 512 || Integer.bitCount(cachePageSize) != 1) {
            throw new IllegalArgumentException("cachePageSize must be a power of two of at least 512");
        }
    }

    /** One connection, 64 requests in flight, 10 s to connect, 2 min per request, structured replies, no cache. */
    public static ClientOptions defaults() {
        return new ClientOptions(1, 64, Duration.ofSeconds(10), Duration.ofMinutes(2), true, 0, 0, 64 * 1024, null);
    }

    public ClientOptions withConnections(int n) {
        return new ClientOptions(n, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead, cachePageSize, completionExecutor);
    }

    public ClientOptions withRequestsInFlight(int n) {
        return new ClientOptions(connections, n, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead, cachePageSize, completionExecutor);
    }

    public ClientOptions withConnectTimeout(Duration d) {
        return new ClientOptions(connections, requestsInFlight, d, requestTimeout, structuredReplies, cacheSize, readahead, cachePageSize, completionExecutor);
    }

    public ClientOptions withRequestTimeout(Duration d) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, d, structuredReplies, cacheSize, readahead, cachePageSize, completionExecutor);
    }

    public ClientOptions withStructuredReplies(boolean on) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, requestTimeout, on, cacheSize, readahead, cachePageSize, completionExecutor);
    }

    /** Turns on the read cache: {@code size} bytes, of which sequential readers prefetch {@code readahead} ahead. */
    public ClientOptions withCache(long size, long readahead) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, size, readahead, cachePageSize, completionExecutor);
    }

    public ClientOptions withCachePageSize(int pageSize) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead, pageSize, completionExecutor);
    }

    /**
     * Completes futures on {@code executor} rather than on the connection's reader thread, so that slow
     * callbacks do not hold up other replies; null restores the default.
     */
    public ClientOptions withCompletionExecutor(Executor executor) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead, cachePageSize, executor);
    }
}
