package io.jnbd.cli;

import io.jnbd.pool.memserver.MemServer;
import io.jnbd.pool.memserver.MemServerAccess;
import io.jnbd.server.AllowList;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.ServerTls;
import io.jnbd.tls.TlsConfigException;
import java.io.IOException;
import java.io.PrintStream;
import java.net.BindException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code jnbd memserver}: one memory server of a pool. */
@Command(name = "memserver", mixinStandardHelpOptions = true, sortOptions = false,
    description = {
        "Run a memory server, which keeps the pages of pool clients in RAM.",
        "With a disk tier (--spill-dir), the least recently used pages spill to disk",
        "when RAM is full. A pool export (jnbd serve --export NAME=pool:HOST:PORT,...)",
        "spreads its virtual disk over several memory servers and keeps N copies of",
        "every extent; see docs/pool.md.",
        "",
        "Each pool client gets its own space, with its own accounting and quota. When",
        "a client's connections are all gone and it has not come back within the",
        "grace, everything it stored is freed. A restarted memory server is empty and",
        "says so: its incarnation changes, and clients never read its earlier data.",
        "",
        "The export 'status' holds the server's state as JSON:",
        "  nbdcopy nbd://HOST:PORT/status - | head -c 2000",
        "",
        "Security (docs/security.md): in plain text the server trusts everyone who can",
        "reach its port; a space's name is its key and is never shown (status, logs and",
        "lists show a fingerprint). With --tls require and --tls-psk or",
        "--tls-certificates --tls-verify-peer, a space belongs to the identity that",
        "made it: no other identity may open it or fence it. --allow limits who may",
        "connect at all; --status-clients who sees the list of clients.",
        ""},
    footer = {
        "",
        "Examples:",
        "  jnbd memserver --listen 127.0.0.1:10810 --memory 4G",
        "  jnbd memserver --listen 0.0.0.0:10810 --memory 16G \\",
        "                 --spill-dir /var/tmp/jnbd-spill --spill-size 64G --client-quota 8G",
        "  jnbd memserver --listen 0.0.0.0:10810 --memory 16G --tls require \\",
        "                 --tls-psk /etc/jnbd/pool.psk --allow 'vmhost1;vmhost2' --status-clients ops",
        "",
        "SIGINT or SIGTERM: stop; the RAM is freed and the spill file deleted."})
public final class MemServerCommand implements Callable<Integer> {
    private static final org.slf4j.Logger log = org.slf4j.LoggerFactory.getLogger(MemServerCommand.class);

    @Option(names = "--listen", paramLabel = "HOST:PORT", description = "TCP address to listen on; repeatable (default 127.0.0.1:10810)")
    List<String> listen = new ArrayList<>();

    @Option(names = "--unix", paramLabel = "PATH", description = "Unix socket to listen on; repeatable")
    List<Path> unix = new ArrayList<>();

    @Option(names = "--memory", paramLabel = "SIZE", required = true, description = "RAM for pages, e.g. 4G (required)")
    String memory;

    @Option(names = "--spill-dir", paramLabel = "DIR", description = "directory for the spill file of the disk tier")
    Path spillDir;

    @Option(names = "--spill-size", paramLabel = "SIZE", description = "size of the disk tier (with --spill-dir)")
    String spillSize;

    @Option(names = "--client-quota", paramLabel = "SIZE", description = "the most one client may store, RAM and spill together (default: no limit)")
    String clientQuota;

    @Option(names = "--grace", paramLabel = "SECONDS", defaultValue = "30",
        description = "how long a client's data outlives its last connection (default ${DEFAULT-VALUE})")
    int grace;

    @Option(names = "--busy-poll", paramLabel = "MICROS", defaultValue = "50",
        description = "poll a connection this long before sleeping when its client sends one request at a time; "
            + "0 never polls (default ${DEFAULT-VALUE}, as for serve)")
    int busyPollMicros;

    @Option(names = "--receive-timeout", paramLabel = "SECONDS", defaultValue = "30",
        description = "as for serve: a client that sent part of a request (a header, a write payload) and then "
            + "nothing for this long is dropped (default ${DEFAULT-VALUE})")
    int receiveTimeout;

    @Option(names = "--tls", paramLabel = "off|on|require", defaultValue = "off",
        description = "as for serve: off refuses STARTTLS; on offers TLS; require refuses every option before "
            + "STARTTLS (default ${DEFAULT-VALUE})")
    String tls;

    @Option(names = "--tls-certificates", paramLabel = "DIR",
        description = "X.509: DIR holds ca-cert.pem, server-cert.pem, server-key.pem and optionally ca-crl.pem")
    Path tlsCertificates;

    @Option(names = "--tls-verify-peer", arity = "0..1", paramLabel = "true|false", defaultValue = "false", fallbackValue = "true",
        description = "X.509: require a client certificate signed by ca-cert.pem (its CN is the client's identity)")
    boolean tlsVerifyPeer;

    @Option(names = "--tls-psk", paramLabel = "FILE",
        description = "PSK: FILE holds psktool's identity:hexkey lines; a pool's tls-username= picks its identity")
    Path tlsPsk;

    @Option(names = "--allow", paramLabel = "LIST",
        description = "only these clients may connect: address ranges (10.0.0.0/8), addresses and TLS identities, "
            + "separated by ';'; repeatable (default: anyone)")
    List<String> allow = new ArrayList<>();

    @Option(names = "--status-clients", paramLabel = "WHO",
        description = "who sees the list of clients in the status export: anyone, authenticated (a TLS identity), "
            + "or administrator identities separated by ';'. Others see the server's own figures, which pool "
            + "clients need (default: authenticated)")
    String statusClients = "authenticated";

    @Option(names = "--stats-interval", paramLabel = "SECONDS", defaultValue = "0",
        description = "every N seconds, log memory in use, clients, throughput and latency; 0 = off")
    int statsInterval;

    @Override
    public Integer call() throws Exception {
        PrintStream err = System.err;
        MemServer.Config config;
        List<SocketAddress> addresses = new ArrayList<>();
        TlsChoice tlsChoice;
        MemServerAccess access;
        try {
            tlsChoice = new TlsChoice(ServerTls.parseMode(tls), tlsCertificates, tlsPsk, tlsVerifyPeer);
            tlsChoice.check();
            access = new MemServerAccess(AllowList.parse(allow), MemServerAccess.StatusClients.parse(statusClients));
            if (tlsChoice.mode() == ServerTls.Mode.OFF && access.allow().namesIdentities()) {
                throw new IllegalArgumentException("--allow " + access.allow() + " names TLS identities, and TLS is off: add --tls require");
            }
            long ram = ExportSpec.parseSize(memory);
            if (ram < (1 << 20)) throw new IllegalArgumentException("--memory must be at least 1M, not " + memory);
            long spill = spillSize == null ? 0 : ExportSpec.parseSize(spillSize);
            if ((spillDir == null) != (spill == 0)) throw new IllegalArgumentException("--spill-dir and --spill-size go together");
            if (spillDir != null && !Files.isDirectory(spillDir)) throw new IllegalArgumentException("--spill-dir " + spillDir + " is not a directory");
            if (grace < 0) throw new IllegalArgumentException("--grace must not be negative");
            long quota = clientQuota == null ? 0 : ExportSpec.parseSize(clientQuota);
            config = new MemServer.Config(ram / 65536 * 65536, spillDir, spill / 65536 * 65536, quota, Duration.ofSeconds(grace));
            for (String l : listen.isEmpty() && unix.isEmpty() ? List.of("127.0.0.1:10810") : listen) {
                addresses.add(ServeCommand.parseHostPort(l));
            }
            unix.forEach(p -> addresses.add(UnixDomainSocketAddress.of(p)));
        } catch (IllegalArgumentException e) {
            err.println("jnbd memserver: " + e.getMessage());
            return 2;
        }
        if (busyPollMicros < 0 || busyPollMicros > 10_000) {
            err.println("jnbd memserver: --busy-poll must be between 0 and 10000 microseconds, not " + busyPollMicros);
            return 2;
        }
        ServerTls serverTls;
        try {
            serverTls = tlsChoice.load();
        } catch (TlsConfigException e) {
            err.println("jnbd memserver: " + e.getMessage());
            return 2;
        }
        if (receiveTimeout < 1) {
            err.println("jnbd memserver: --receive-timeout must be at least 1 second");
            return 2;
        }
        MemServer server = MemServer.start(config, ServerConfig.defaults().withBusyPoll(Duration.ofNanos(busyPollMicros * 1000L))
            .withReceiveTimeout(Duration.ofSeconds(receiveTimeout)), serverTls, access);
        boolean remote = addresses.stream().anyMatch(a -> a instanceof InetSocketAddress i
            && (i.getAddress() == null || !i.getAddress().isLoopbackAddress()));
        if (serverTls.mode() == ServerTls.Mode.OFF && remote) {
            log.warn("TLS is off: anyone who can reach this server's port is trusted; a space is protected only by its "
                + "name, which is never shown (docs/security.md)");
        } else if (serverTls.mode() != ServerTls.Mode.OFF) {
            log.info("TLS {}: {}; status lists the clients to: {}", serverTls.mode() == ServerTls.Mode.REQUIRE ? "required" : "offered",
                serverTls.context().describe(), access.statusClients());
        }
        installSignalHandlers(server);
        List<String> bound = new ArrayList<>();
        for (SocketAddress a : addresses) {
            try {
                SocketAddress b = server.listen(a);
                bound.add(b instanceof InetSocketAddress i ? i.getHostString() + ":" + i.getPort() : b.toString());
            } catch (IOException e) {
                err.println("jnbd memserver: cannot listen on " + a + ": "
                    + (e instanceof BindException ? e.getMessage().replace(" (Bind failed)", "") : e.getMessage()));
                server.stop(Duration.ZERO);
                return 1;
            }
        }
        if (statsInterval > 0) server.reportStatsEvery(Duration.ofSeconds(statsInterval));
        System.out.println("jnbd memserver: " + (config.memory() >> 20) + " MiB of RAM"
            + (config.spillDir() == null ? "" : ", " + (config.spillSize() >> 20) + " MiB of spill in " + config.spillDir())
            + ", incarnation " + Long.toHexString(server.incarnation()) + ", on " + String.join(", ", bound)
            + "; press Ctrl-C to stop");
        System.out.flush();
        server.awaitStop();
        return 0;
    }

    @SuppressWarnings("restriction")
    private static void installSignalHandlers(MemServer server) {
        for (String name : List.of("INT", "TERM")) {
            try {
                sun.misc.Signal.handle(new sun.misc.Signal(name), sig ->
                    Thread.ofPlatform().name("jnbd-shutdown").start(() -> server.stop(Duration.ofSeconds(5))));
            } catch (IllegalArgumentException e) {
                // signal not available here: the JVM's default handling applies
            }
        }
    }
}
