package io.jnbd.client;

import io.jnbd.protocol.MetaContextRequest;
import io.jnbd.tls.TlsClientSettings;

import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.LinkedHashSet;
import java.util.List;
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
 *                          run); null for the thread that learns the outcome, mostly the connection's reader
 *                          thread, which then reads no further reply until the callback returns (docs/client.md,
 *                          "Where callbacks run", lists them all)
 * @param tls               TLS for every connection, even to an {@code nbd://} URI; null: only where the URI asks
 *                          for it ({@code nbds://}). See {@link #withTls}
 * @param metaContexts      metadata contexts to negotiate besides {@code base:allocation}; see {@link #withMetaContexts}
 * @param reconnectDelay    how long a connection that drops may stay away before its requests fail; {@link Duration#ZERO}:
 *                          no reconnecting, a lost connection fails its requests at once. See {@link #withReconnect}
 */
public record ClientOptions(int connections, int requestsInFlight, Duration connectTimeout, Duration requestTimeout,
                            boolean structuredReplies, long cacheSize, long readahead, int cachePageSize,
                            Executor completionExecutor, TlsClientSettings tls, List<String> metaContexts,
                            Duration reconnectDelay) {

    /** Options without reconnecting: the form before it, kept for source compatibility. */
    public ClientOptions(int connections, int requestsInFlight, Duration connectTimeout, Duration requestTimeout,
                         boolean structuredReplies, long cacheSize, long readahead, int cachePageSize,
                         Executor completionExecutor, TlsClientSettings tls, List<String> metaContexts) {
        this(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead,
            cachePageSize, completionExecutor, tls, metaContexts, Duration.ZERO);
    }

    /** Options without metadata contexts beyond base:allocation: the form before them, kept for source compatibility. */
    public ClientOptions(int connections, int requestsInFlight, Duration connectTimeout, Duration requestTimeout,
                         boolean structuredReplies, long cacheSize, long readahead, int cachePageSize,
                         Executor completionExecutor, TlsClientSettings tls) {
        this(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead,
            cachePageSize, completionExecutor, tls, List.of(), Duration.ZERO);
    }

    /** Options without TLS of their own: the form before TLS, kept for source compatibility. */
    public ClientOptions(int connections, int requestsInFlight, Duration connectTimeout, Duration requestTimeout,
                         boolean structuredReplies, long cacheSize, long readahead, int cachePageSize,
                         Executor completionExecutor) {
        this(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead,
            cachePageSize, completionExecutor, null, List.of(), Duration.ZERO);
    }

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
        metaContexts = metaContexts == null ? List.of() : List.copyOf(new LinkedHashSet<>(metaContexts));
        for (String c : metaContexts) {
            if (c.isEmpty()) throw new IllegalArgumentException("a metadata context name must not be empty");
        }
        if (reconnectDelay == null) reconnectDelay = Duration.ZERO;
        if (reconnectDelay.isNegative()) throw new IllegalArgumentException("reconnectDelay must not be negative");
        if (metaContexts.size() >= MetaContextRequest.MAX_QUERIES) {
            throw new IllegalArgumentException("at most " + (MetaContextRequest.MAX_QUERIES - 1) + " metadata contexts");
        }
    }

    /** One connection, 64 requests in flight, 10 s to connect, 2 min per request, structured replies, no cache. */
    public static ClientOptions defaults() {
        return new ClientOptions(1, 64, Duration.ofSeconds(10), Duration.ofMinutes(2), true, 0, 0, 64 * 1024, null, null, List.of(), Duration.ZERO);
    }

    public ClientOptions withConnections(int n) {
        return new ClientOptions(n, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead, cachePageSize, completionExecutor, tls, metaContexts, reconnectDelay);
    }

    public ClientOptions withRequestsInFlight(int n) {
        return new ClientOptions(connections, n, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead, cachePageSize, completionExecutor, tls, metaContexts, reconnectDelay);
    }

    public ClientOptions withConnectTimeout(Duration d) {
        return new ClientOptions(connections, requestsInFlight, d, requestTimeout, structuredReplies, cacheSize, readahead, cachePageSize, completionExecutor, tls, metaContexts, reconnectDelay);
    }

    public ClientOptions withRequestTimeout(Duration d) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, d, structuredReplies, cacheSize, readahead, cachePageSize, completionExecutor, tls, metaContexts, reconnectDelay);
    }

    public ClientOptions withStructuredReplies(boolean on) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, requestTimeout, on, cacheSize, readahead, cachePageSize, completionExecutor, tls, metaContexts, reconnectDelay);
    }

    /** Turns on the read cache: {@code size} bytes, of which sequential readers prefetch {@code readahead} ahead. */
    public ClientOptions withCache(long size, long readahead) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, size, readahead, cachePageSize, completionExecutor, tls, metaContexts, reconnectDelay);
    }

    public ClientOptions withCachePageSize(int pageSize) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead, pageSize, completionExecutor, tls, metaContexts, reconnectDelay);
    }

    /**
     * Completes futures on {@code executor} rather than on the connection's reader thread, so that slow
     * callbacks do not hold up other replies; null restores the default.
     */
    public ClientOptions withCompletionExecutor(Executor executor) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead, cachePageSize, executor, tls, metaContexts, reconnectDelay);
    }

    /**
     * Requires TLS (STARTTLS) on every connection with {@code settings}, whatever the URI's scheme; null restores
     * the default (TLS only for {@code nbds} URIs). With an {@code nbds} URI the URI comes first: its certificate
     * directory, PSK file and user replace these where it gives them, either side can turn peer verification
     * off, and the name checked is the URI's ({@link NbdUri#tls()}). {@code serverName} may be null: the URI's
     * host is then checked.
     */
    public ClientOptions withTls(TlsClientSettings settings) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead, cachePageSize, completionExecutor, settings, metaContexts, reconnectDelay);
    }

    /**
     * Negotiates these metadata contexts (e.g. {@code qemu:dirty-bitmap:b0}) besides {@code base:allocation}, for
     * {@link NbdClient#blockStatus(String, long, long)}. A context the server does not offer is simply not
     * negotiated: {@link NbdClient#metaContexts()} says which were, {@link NbdClient#listMetaContexts} which
     * exist. Queries with an empty leaf ({@code qemu:dirty-bitmap:}) select what the server chooses to give.
     */
    public ClientOptions withMetaContexts(String... contexts) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead, cachePageSize, completionExecutor, tls, List.of(contexts), reconnectDelay);
    }

    /**
     * Reconnects a connection that drops (the server closed it, restarted, crashed, or answered {@code ESHUTDOWN}),
     * for up to {@code delay}: with growing pauses between attempts, redoing the handshake (TLS too), checking that
     * it reached the same export (the size, whether it is read-only, the capabilities in use, and the server's
     * identity of the export where it names one) and sending again, in their order, the requests that had no
     * answer. Requests made meanwhile wait. Only when the server stays away longer than {@code delay} do they, and
     * every later one, fail with {@link NbdConnectionException}; a server that comes back with another export fails
     * them at once, and nothing is written into it. {@link Duration#ZERO} turns it off (the default). See
     * docs/client.md, "Reconnect", for what a write acknowledged before a server's crash can and cannot count on.
     */
    public ClientOptions withReconnect(Duration delay) {
        return new ClientOptions(connections, requestsInFlight, connectTimeout, requestTimeout, structuredReplies, cacheSize, readahead, cachePageSize, completionExecutor, tls, metaContexts, delay);
    }

    /** Whether a dropped connection is reconnected ({@link #withReconnect}). */
    public boolean reconnects() {
        return !reconnectDelay.isZero();
    }

    /** The TLS a connection to {@code uri} uses under these options, or null for none. */
    TlsClientSettings tlsFor(NbdUri uri) {
        TlsClientSettings u = uri.tls();
        TlsClientSettings o = tls;
        if (o == null) return u;
        if (u == null) {
            String host = o.serverName() != null ? o.serverName()
                : uri.address() instanceof InetSocketAddress a ? a.getHostString() : null;
            return new TlsClientSettings(o.certificates(), o.pskFile(), o.pskIdentity(), o.verifyPeer(), host);
        }
        return new TlsClientSettings(u.certificates() != null ? u.certificates() : o.certificates(),
            u.pskFile() != null ? u.pskFile() : o.pskFile(),
            u.pskIdentity() != null ? u.pskIdentity() : o.pskIdentity(),
            u.verifyPeer() && o.verifyPeer(),
            u.serverName() != null ? u.serverName() : o.serverName());
    }
}
