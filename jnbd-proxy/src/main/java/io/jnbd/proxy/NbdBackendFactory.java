package io.jnbd.proxy;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdUri;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendFactory;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.Completions;
import java.io.IOException;
import java.time.Duration;
import java.util.Locale;
import java.util.Set;

/**
 * {@code nbd:URI[,connections=N][,timeout=DURATION][,connect-timeout=DURATION]}: the export {@code URI} names on another NBD server, in any
 * form jnbd's client takes ({@code nbd://}, {@code nbds://} with TLS, {@code nbd+unix://}; see {@link NbdUri}).
 */
public final class NbdBackendFactory implements BackendFactory {
    static final int DEFAULT_CONNECTIONS = 4;
    static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(30);
    static final Duration DEFAULT_CONNECT_TIMEOUT = Duration.ofSeconds(10);

    @Override public String kind() { return "nbd"; }

    @Override public String usage() { return "nbd:URI[,connections=N][,timeout=DURATION][,connect-timeout=DURATION]"; }

    @Override public Set<String> options() { return Set.of("connections", "timeout", "connect-timeout"); }

    /**
     * A URI may hold a comma: a part without {@code =} that is no option continues it. A comma followed by a
     * {@code key=value} is read as an option, so such a URI is given in a config file, or with {@code %2C}.
     */
    @Override
    public boolean continuesTarget(String part) {
        return !options().contains(part);
    }

    @Override
    public void check(String target, BackendOptions options) {
        uri(target);
        clientOptions(options);
    }

    @Override
    public Set<Backend.Trait> traits(String target, BackendOptions options) {
        return Set.of(Backend.Trait.REMOTE, Backend.Trait.ASYNC);
    }

    @Override
    public Backend open(String target, BackendOptions options, boolean readOnly) throws IOException {
        return new NbdBackend(Upstream.open(uri(target), clientOptions(options)), readOnly);
    }

    private static NbdUri uri(String target) {
        if (target.isEmpty()) throw new IllegalArgumentException("nbd: needs the upstream's URI, e.g. nbd:nbd://HOST:PORT/EXPORT");
        return NbdUri.parse(target);
    }

    /**
     * {@code timeout} bounds each request and {@code connect-timeout} each attempt to connect (and so how long
     * requests wait for an upstream that is away): an upstream that stops answering fails them with EIO rather
     * than leaving clients waiting.
     */
    static ClientOptions clientOptions(BackendOptions o) {
        int connections = o.integer("connections", 1, 64, DEFAULT_CONNECTIONS);
        // The upstream's reader completes the replies that arrived together as one task: the server's replies to
        // them then leave together too, in one write per client connection.
        return ClientOptions.defaults().withConnections(connections).withCompletionExecutor(Completions::together)
            .withRequestTimeout(duration(o, "timeout", DEFAULT_TIMEOUT))
            .withConnectTimeout(duration(o, "connect-timeout", DEFAULT_CONNECT_TIMEOUT));
    }

    private static Duration duration(BackendOptions o, String key, Duration fallback) {
        return o.has(key) ? duration(key, o.string(key, null)) : fallback;
    }

    /** {@code 30}, {@code 30s}, {@code 500ms} or {@code 2m}; a bare number is seconds. */
    static Duration duration(String key, String text) {
        String t = text.strip().toLowerCase(Locale.ROOT);
        int unit = t.length();
        while (unit > 0 && !Character.isDigit(t.charAt(unit - 1))) unit--;
        try {
            long n = Long.parseLong(t.substring(0, unit));
            Duration d = switch (t.substring(unit)) {
                case "", "s" -> Duration.ofSeconds(n);
                case "ms" -> Duration.ofMillis(n);
                case "m", "min" -> Duration.ofMinutes(n);
                default -> null;
            };
            if (d != null && d.toMillis() >= 1 && d.compareTo(Duration.ofHours(1)) <= 0) return d;
        } catch (NumberFormatException e) {
            // the message below says what is wanted
        }
        throw new IllegalArgumentException(key + " must be a duration from 1ms to 1h such as 30s or 500ms, not '" + text + "'");
    }
}
