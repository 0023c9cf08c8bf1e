package io.jnbd.server;

import io.prometheus.metrics.core.metrics.GaugeWithCallback;
import io.prometheus.metrics.exporter.httpserver.HTTPServer;
import io.prometheus.metrics.model.registry.PrometheusRegistry;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.util.function.DoubleSupplier;

/**
 * Serves a server's metrics over HTTP in the Prometheus text format, at {@code /metrics}. Binding and exposing
 * are two steps, so that a command line can learn that the address is taken before it opens anything else:
 *
 * <pre>{@code
 * try (var endpoint = MetricsEndpoint.bind(new InetSocketAddress("127.0.0.1", 9100))) {
 *     endpoint.expose(server);
 *     server.awaitStop();
 * }
 * }</pre>
 */
public final class MetricsEndpoint implements AutoCloseable {
    private final PrometheusRegistry registry = new PrometheusRegistry();
    private final HTTPServer http;

    private MetricsEndpoint(InetSocketAddress address) throws IOException {
        // The library's own pool of daemon threads: a scrape never waits on a request's thread, nor the reverse.
        this.http = HTTPServer.builder().inetAddress(address.getAddress()).port(address.getPort()).registry(registry)
            .buildAndStart();
    }

    /** Listens on {@code address}; /metrics is empty until {@link #expose}. */
    public static MetricsEndpoint bind(InetSocketAddress address) throws IOException {
        if (address.isUnresolved()) throw new UnknownHostException("unknown host " + address.getHostString());
        return new MetricsEndpoint(address);
    }

    /** The port the endpoint listens on (the one the system chose, when bound to port 0). */
    public int port() {
        return http.getPort();
    }

    /** Serves {@code server}'s per-export statistics and its server-wide gauges. */
    public void expose(NbdServer server) {
        // Every export's series from the first scrape on, zeros included: rate() needs a start to count from.
        for (Export e : server.exports().all()) server.stats().export(e.name());
        server.stats().register(registry);
        gauge("jnbd_connections_open", "Open connections holding a slot of --max-connections (in the handshake or "
            + "transmission)", server::connectionCount);
        gauge("jnbd_buffer_in_use_bytes", "Off-heap buffer memory on loan for block data", server::bufferBytesInUse);
        gauge("jnbd_buffer_peak_bytes", "The most off-heap buffer memory that was ever on loan at once", server::bufferPeakBytes);
        gauge("jnbd_buffer_budget_bytes", "Off-heap buffer memory the server may lend at once (--buffer-memory)",
            server::bufferBudgetBytes);
        gauge("jnbd_io_queue_length", "Disk operations waiting for an I/O thread", server::ioQueueLength);
        gauge("jnbd_io_threads_busy", "I/O threads running a disk operation (of --io-threads)", server::ioThreadsBusy);
    }

    private void gauge(String name, String help, DoubleSupplier value) {
        GaugeWithCallback.builder().name(name).help(help).callback(g -> g.call(value.getAsDouble())).register(registry);
    }

    @Override
    public void close() {
        http.close();
    }
}
