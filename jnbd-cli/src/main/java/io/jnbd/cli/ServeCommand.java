package io.jnbd.cli;

import io.jnbd.server.ConfigFile;
import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.ServerTls;
import io.jnbd.tls.TlsConfigException;
import java.io.IOException;
import java.io.PrintStream;
import java.net.BindException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.file.NoSuchFileException;
import java.nio.file.AccessDeniedException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

@Command(name = "serve", mixinStandardHelpOptions = true, sortOptions = false,
    description = {
        "Serve files, block devices and memory over the NBD protocol.",
        "",
        "With no --export and no --config, serves export 'default' (also the empty",
        "name): ./jnbd-data/default.img, 1 GiB sparse, created on first run, on",
        "127.0.0.1:10809.",
        "",
        "An export SPEC is file:PATH, memory:SIZE or pool:HOST:PORT,..., then",
        "comma-separated options:",
        "  size=SIZE          create the file if missing, grow it if smaller (file:);",
        "                     the virtual disk's size (pool:)",
        "  readonly           refuse writes, trims and zeroes with EPERM",
        "  mode=cached        page cache; reads leave by sendfile (default)",
        "  mode=direct        O_DIRECT into aligned off-heap buffers",
        "  split=SIZE,chunk=SIZE,streams=N",
        "                     reads above split are read in chunks, streams at a",
        "                     time, each sent as soon as it is read (direct and",
        "                     memory exports; defaults 1M, 512K, and 2 streams",
        "                     for files, 4 for memory)",
        "  scheduler=none     requests go to disk as they arrive (default)",
        "  scheduler=sorted   each batch that arrived together is sorted by offset",
        "                     and adjacent reads or writes are merged",
        "  allow=LIST         only these clients see and open the export: address",
        "                     ranges and addresses (10.0.0.0/8, fd00::/8, 192.0.2.7)",
        "                     and TLS identities (a PSK identity, or a name in the",
        "                     client's certificate: CN, DNS or IP SAN), separated",
        "                     by ';' (quote it in a shell); others get POLICY",
        "  description=TEXT   shown by nbdinfo; must come last, may hold commas",
        "A pool: export spreads its disk over memory servers (jnbd memserver) and",
        "keeps copies of every extent; its state is in the export NAME/status:",
        "  replicas=N         copies of each extent (default 2)",
        "  extent=SIZE        the unit of placement (default 4M)",
        "  server-timeout=S   a server silent this long is lost (default 3)",
        "  recovery-rate=SIZE bytes per second for restoring copies (default 512M)",
        "SIZE takes K, M, G, T suffixes (powers of 1024), e.g. 64M, 10G.",
        "",
        "TLS (NBD_OPT_STARTTLS, with nbdkit's options): --tls on offers it, --tls",
        "require refuses every option before it. X.509: --tls-certificates DIR with",
        "ca-cert.pem, server-cert.pem, server-key.pem (and ca-crl.pem if any);",
        "--tls-verify-peer also requires a client certificate signed by ca-cert.pem.",
        "PSK: --tls-psk FILE of psktool's identity:hexkey lines.",
        ""},
    footer = {
        "",
        "Examples:",
        "  jnbd serve",
        "  jnbd serve --export disk=file:/var/lib/vm.img,mode=direct \\",
        "             --export scratch=memory:4G",
        "  jnbd serve --listen 0.0.0.0:10809 --unix /run/jnbd.sock \\",
        "             --export img=file:disk.img,size=20G,readonly",
        "  jnbd serve --config /etc/jnbd.conf",
        "  jnbd serve --export swap=pool:10.0.0.1:10810,10.0.0.2:10810,10.0.0.3:10810,size=8G",
        "  jnbd serve --tls require --tls-certificates /etc/pki/jnbd --tls-verify-peer \\",
        "             --export 'disk=file:/var/lib/vm.img,allow=alice;10.0.0.0/8'",
        "  jnbd serve --tls require --tls-psk /etc/jnbd/keys.psk --export scratch=memory:4G",
        "",
        "Connect with:",
        "  nbdinfo --list nbd://127.0.0.1:10809",
        "  qemu-img info nbd://127.0.0.1:10809/default",
        "  nbd-client -N default 127.0.0.1 10809 /dev/nbd0",
        "  nbdinfo 'nbds://127.0.0.1:10809/disk?tls-certificates=/etc/pki/jnbd-client'",
        "  nbdinfo 'nbds://alice@127.0.0.1:10809/scratch?tls-psk-file=/etc/jnbd/keys.psk'",
        "",
        "SIGINT or SIGTERM: stop accepting, finish the requests in flight, flush,",
        "exit 0."})
public final class ServeCommand implements Callable<Integer> {

    @Option(names = "--listen", paramLabel = "HOST:PORT",
        description = "TCP address to listen on; repeatable (default 127.0.0.1:10809 unless only --unix is given)")
    List<String> listen = new ArrayList<>();

    @Option(names = "--unix", paramLabel = "PATH", description = "Unix socket to listen on; repeatable")
    List<Path> unix = new ArrayList<>();

    @Option(names = {"-e", "--export"}, paramLabel = "NAME=SPEC", description = "an export; repeatable (see SPEC above)")
    List<String> exports = new ArrayList<>();

    @Option(names = "--config", paramLabel = "FILE",
        description = "read listeners and exports from FILE (lines 'listen = HOST:PORT', 'unix = PATH', "
            + "'export NAME = SPEC', 'default-export = NAME', 'receive-timeout = SECONDS', 'backlog = N', "
            + "'tls = off|on|require', 'tls-certificates = DIR', 'tls-verify-peer = true', 'tls-psk = FILE'; "
            + "'#' starts a comment; the command line wins)")
    Path config;

    @Option(names = "--tls", paramLabel = "off|on|require",
        description = "off: refuse STARTTLS; on: offer TLS, plain clients still served; require: every option "
            + "before STARTTLS gets NBD_REP_ERR_TLS_REQD (default off)")
    String tls;

    @Option(names = "--tls-certificates", paramLabel = "DIR",
        description = "X.509: DIR holds ca-cert.pem, server-cert.pem, server-key.pem and optionally ca-crl.pem")
    Path tlsCertificates;

    @Option(names = "--tls-verify-peer", arity = "0..1", paramLabel = "true|false",
        description = "X.509: require a client certificate signed by ca-cert.pem")
    Boolean tlsVerifyPeer;

    @Option(names = "--tls-psk", paramLabel = "FILE",
        description = "PSK: FILE holds psktool's identity:hexkey lines; a client's identity is its user name (nbds://alice@...)")
    Path tlsPsk;

    @Option(names = "--default-export", paramLabel = "NAME",
        description = "export that the empty name selects (default: the first export)")
    String defaultExport;

    @Option(names = "--handshake-timeout", paramLabel = "SECONDS", defaultValue = "10",
        description = "close clients that have not finished the handshake by then (default ${DEFAULT-VALUE})")
    int handshakeTimeout;

    @Option(names = "--send-timeout", paramLabel = "SECONDS", defaultValue = "60",
        description = "drop a client whose replies have not moved for this long, so clients that stop reading "
            + "cannot hold buffers from the others (default ${DEFAULT-VALUE})")
    int sendTimeout;

    @Option(names = "--receive-timeout", paramLabel = "SECONDS",
        description = "drop a client that sent part of a request (a header, a write payload) and then nothing "
            + "for this long, giving back the buffers it holds; clients idle between requests stay "
            + "(default 30)")
    Integer receiveTimeout;

    @Option(names = "--backlog", paramLabel = "N",
        description = "connections the kernel queues before the server accepts them (default: the system's "
            + "limit, net.core.somaxconn)")
    Integer backlog;

    @Option(names = "--max-connections", paramLabel = "N", defaultValue = "16384",
        description = "clients served at once; one more is told 'server has reached its limit' in its handshake "
            + "and closed. An idle client costs a few KiB and no thread; each needs a file descriptor, so "
            + "keep N under 'ulimit -n' (default ${DEFAULT-VALUE})")
    int maxConnections;

    @Option(names = "--operator-slots", paramLabel = "N", defaultValue = "4",
        description = "connections allowed beyond --max-connections to clients on this host (loopback or a Unix "
            + "socket), so that an operator's nbdinfo still gets through a full server (default ${DEFAULT-VALUE})")
    int operatorSlots;

    @Option(names = "--busy-poll", paramLabel = "MICROS", defaultValue = "50",
        description = "poll a connection for up to this long before sleeping, when its client sends one request "
            + "at a time: halves the latency of small cached reads for a little CPU; 0 never polls (default ${DEFAULT-VALUE})")
    int busyPollMicros;

    @Option(names = "--send-buffer", paramLabel = "SIZE|auto|kernel", defaultValue = "auto",
        description = "socket send buffer of TCP clients. auto: 256K for clients on this host, where it saves "
            + "server CPU at no cost in throughput, the kernel's autotuning for remote ones; kernel: autotuning "
            + "for all; SIZE (4K to 64M): that for all (default ${DEFAULT-VALUE})")
    String sendBuffer;

    @Option(names = "--requests-in-flight", paramLabel = "N", defaultValue = "64",
        description = "requests served at once per connection before the server stops reading from it (default ${DEFAULT-VALUE})")
    int requestsInFlight;

    @Option(names = "--io-threads", paramLabel = "N", defaultValue = "32",
        description = "threads running disk operations (default ${DEFAULT-VALUE})")
    int ioThreads;

    @Option(names = "--buffer-memory", paramLabel = "SIZE", defaultValue = "256M",
        description = "off-heap memory all connections may hold for block data (default ${DEFAULT-VALUE})")
    String bufferMemory;

    @Option(names = "--stats-interval", paramLabel = "SECONDS", defaultValue = "0",
        description = "every N seconds, log throughput and p50/p99 time of requests in each state "
            + "(waiting, disk, sending, total); 0 = off")
    int statsInterval;

    @Option(names = "--data-dir", paramLabel = "DIR", defaultValue = "jnbd-data",
        description = "directory of the embedded default export's default.img (default ./${DEFAULT-VALUE})")
    Path dataDir;

    static int parseSendBuffer(String value) {
        switch (value) {
            case "auto" -> { return ServerConfig.SEND_BUFFER_AUTO; }
            case "kernel" -> { return ServerConfig.SEND_BUFFER_KERNEL; }
            default -> {
                long bytes;
                try {
                    bytes = ExportSpec.parseSize(value);
                } catch (IllegalArgumentException e) {
                    throw new IllegalArgumentException("must be a size such as 256K, auto or kernel, not '" + value + "'");
                }
                if (bytes < 4096 || bytes > 64 << 20) {
                    throw new IllegalArgumentException("must be between 4K and 64M, not " + value);
                }
                return (int) bytes;
            }
        }
    }

    @Override
    public Integer call() throws Exception {
        PrintStream err = System.err;
        if (busyPollMicros < 0 || busyPollMicros > 10_000) {
            err.println("jnbd serve: --busy-poll must be between 0 and 10000 microseconds, not " + busyPollMicros);
            return 2;
        }
        int sendBufferBytes;
        try {
            sendBufferBytes = parseSendBuffer(sendBuffer);
        } catch (IllegalArgumentException e) {
            err.println("jnbd serve: --send-buffer " + e.getMessage());
            return 2;
        }
        List<ExportSpec> specs = new ArrayList<>();
        List<String> tcp = new ArrayList<>(listen);
        List<Path> unixPaths = new ArrayList<>(unix);
        String defaultName = defaultExport;
        Integer receiveSeconds = receiveTimeout, backlogSize = backlog;
        TlsChoice tlsChoice;
        try {
            ServerTls.Mode tlsMode = tls == null ? null : mode(tls);
            Path certificates = tlsCertificates, psk = tlsPsk;
            Boolean verifyPeer = tlsVerifyPeer;
            if (config != null) {
                ConfigFile cf = ConfigFile.read(config);
                specs.addAll(cf.exports());
                tcp.addAll(cf.listen());
                cf.unix().forEach(u -> unixPaths.add(Path.of(u)));
                if (defaultName == null) defaultName = cf.defaultExport();
                if (receiveSeconds == null) receiveSeconds = cf.receiveTimeout();
                if (backlogSize == null) backlogSize = cf.backlog();
                if (tlsMode == null) tlsMode = cf.tls();
                if (certificates == null) certificates = cf.tlsCertificates();
                if (psk == null) psk = cf.tlsPsk();
                if (verifyPeer == null) verifyPeer = cf.tlsVerifyPeer();
            }
            tlsChoice = new TlsChoice(tlsMode == null ? ServerTls.Mode.OFF : tlsMode, certificates, psk,
                verifyPeer != null && verifyPeer);
            tlsChoice.check();
            if (receiveSeconds != null && receiveSeconds <= 0) {
                throw new IllegalArgumentException("--receive-timeout must be at least 1 second, not " + receiveSeconds);
            }
            if (backlogSize != null && backlogSize <= 0) {
                throw new IllegalArgumentException("--backlog must be at least 1, not " + backlogSize);
            }
            for (String e : exports) specs.add(ExportSpec.parse(e));
            if (specs.isEmpty()) {
                specs.add(ExportSpec.parse("default", "file:" + dataDir.resolve("default.img").toAbsolutePath() + ",size=1G"));
            }
            if (tcp.isEmpty() && unixPaths.isEmpty()) tcp.add("127.0.0.1:" + io.jnbd.protocol.Nbd.DEFAULT_PORT);
        } catch (IllegalArgumentException | NoSuchFileException e) {
            err.println("jnbd serve: " + (e instanceof NoSuchFileException ? "no such config file " + e.getMessage() : e.getMessage()));
            return 2;
        }

        List<SocketAddress> addresses = new ArrayList<>();
        for (String t : tcp) {
            try {
                addresses.add(parseHostPort(t));
            } catch (IllegalArgumentException e) {
                err.println("jnbd serve: " + e.getMessage());
                return 2;
            }
        }
        unixPaths.forEach(p -> addresses.add(UnixDomainSocketAddress.of(p)));

        if (tlsChoice.mode() == ServerTls.Mode.OFF) {
            for (ExportSpec s : specs) {
                if (s.access().namesIdentities()) {
                    org.slf4j.LoggerFactory.getLogger(ServeCommand.class).warn("export '{}': allow={} names TLS identities, "
                        + "and TLS is off (--tls): only its address entries can admit anyone", s.name(), s.access());
                }
            }
        }
        // Before any export is opened (a file export may create its file): a TLS setting that cannot work stops everything.
        ServerTls serverTls;
        try {
            serverTls = tlsChoice.load();
        } catch (TlsConfigException e) {
            err.println("jnbd serve: " + e.getMessage());
            return 2;
        }

        List<Export> opened = new ArrayList<>();
        for (ExportSpec s : specs) {
            try {
                opened.add(s.openExport());
            } catch (IOException e) {
                opened.forEach(ServeCommand::closeQuietly);
                err.println("jnbd serve: export '" + s.name() + "': cannot open " + s.target() + ": " + describe(e));
                return 1;
            }
        }
        // A backend with a state of its own (a pool) reports it as JSON in NAME/status.
        for (Export e : List.copyOf(opened)) {
            if (e.backend() instanceof io.jnbd.server.backend.StatusReporting r) {
                var status = new io.jnbd.server.backend.DocumentBackend(256 * 1024, r::statusJson, "status of " + e.name());
                opened.add(new Export(e.name() + "/status", "status of '" + e.name() + "' (JSON)", status,
                    io.jnbd.server.ExportTuning.defaultsFor(status.traits()), e.access()));
            }
        }
        Exports registry;
        try {
            registry = new Exports(opened, defaultName);
        } catch (IllegalArgumentException e) {
            opened.forEach(ServeCommand::closeQuietly);
            err.println("jnbd serve: " + e.getMessage());
            return 2;
        }
        if (maxConnections < 1 || operatorSlots < 0) {
            opened.forEach(ServeCommand::closeQuietly);
            err.println("jnbd serve: " + (maxConnections < 1 ? "--max-connections must be at least 1, not " + maxConnections
                : "--operator-slots must be 0 or more, not " + operatorSlots));
            return 2;
        }
        warnIfTooFewDescriptors(maxConnections + operatorSlots);
        ServerConfig cfg = ServerConfig.defaults()
            .withHandshakeTimeout(Duration.ofSeconds(handshakeTimeout))
            .withRequestsInFlight(requestsInFlight)
            .withSendTimeout(Duration.ofSeconds(sendTimeout))
            .withIoThreads(ioThreads)
            .withBusyPoll(Duration.ofNanos(busyPollMicros * 1000L))
            .withSendBuffer(sendBufferBytes)
            .withBufferBudget(ExportSpec.parseSize(bufferMemory))
            .withReceiveTimeout(receiveSeconds != null ? Duration.ofSeconds(receiveSeconds) : ServerConfig.DEFAULT_RECEIVE_TIMEOUT)
            .withBacklog(backlogSize != null ? backlogSize : 0)
            .withMaxConnections(maxConnections)
            .withOperatorSlots(operatorSlots);
        if (serverTls.mode() != ServerTls.Mode.OFF) {
            org.slf4j.LoggerFactory.getLogger(ServeCommand.class).info("TLS {}: {}",
                serverTls.mode() == ServerTls.Mode.REQUIRE ? "required" : "offered", serverTls.context().describe());
        }
        NbdServer server = new NbdServer(registry, cfg, serverTls);
        // Before the first listener: a SIGTERM that arrives as soon as the port accepts must still exit 0.
        installSignalHandlers(server);
        List<SocketAddress> bound = new ArrayList<>();
        for (SocketAddress a : addresses) {
            try {
                bound.add(server.listen(a));
            } catch (IOException e) {
                if (server.isStopping()) {
                    server.awaitStop();
                    return 0;
                }
                err.println("jnbd serve: cannot listen on " + NbdServer.describe(a) + ": "
                    + (e instanceof BindException ? e.getMessage().replace(" (Bind failed)", "") : describe(e)));
                server.stop(Duration.ZERO);
                return 1;
            }
        }
        if (statsInterval > 0) server.reportStatsEvery(Duration.ofSeconds(statsInterval));
        printBanner(registry, bound, tlsChoice);
        server.awaitStop();
        return 0;
    }

    private static void closeQuietly(Export e) {
        try {
            e.backend().close();
        } catch (IOException ignored) {
            // start-up already failed; the first error is the one to report
        }
    }

    private static String describe(IOException e) {
        if (e instanceof NoSuchFileException n) return n.getReason() != null ? n.getReason() : "no such file";
        if (e instanceof AccessDeniedException) return "permission denied";
        return e.getMessage() != null ? e.getMessage() : e.toString();
    }

    static InetSocketAddress parseHostPort(String s) {
        int colon = s.lastIndexOf(':');
        if (colon < 0) throw new IllegalArgumentException("'" + s + "' is not HOST:PORT");
        String host = s.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) host = host.substring(1, host.length() - 1);
        int port;
        try {
            port = Integer.parseInt(s.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("'" + s + "' has no valid port");
        }
        if (port < 0 || port > 65535) throw new IllegalArgumentException("port " + port + " is out of range");
        return new InetSocketAddress(host.isEmpty() ? "0.0.0.0" : host, port);
    }

    /** SIGINT and SIGTERM mean a clean stop with exit status 0, not the JVM's 130/143. */
    @SuppressWarnings("restriction")
    /**
     * Each client needs a file descriptor: with fewer than the limit asks for, accept fails once they run out
     * and clients wait in the kernel's queue instead of being told why. The JVM raises its soft limit to the
     * hard one at start, so what /proc shows now is all there is.
     */
    private void warnIfTooFewDescriptors(int connections) {
        try {
            for (String line : java.nio.file.Files.readAllLines(java.nio.file.Path.of("/proc/self/limits"))) {
                if (!line.startsWith("Max open files")) continue;
                String soft = line.substring("Max open files".length()).strip().split("\\s+")[0];
                if (soft.equals("unlimited")) return;
                long limit = Long.parseLong(soft);
                if (limit < connections + 256L) {
                    org.slf4j.LoggerFactory.getLogger(ServeCommand.class).warn(
                        "only {} file descriptors (ulimit -n): at most about {} clients can connect, not {}; "
                            + "raise the limit or lower --max-connections", limit, Math.max(0, limit - 256), connections);
                }
                return;
            }
        } catch (java.io.IOException | RuntimeException e) {
            // not Linux, or no /proc: nothing to check against
        }
    }

    private static void installSignalHandlers(NbdServer server) {
        for (String name : List.of("INT", "TERM")) {
            try {
                sun.misc.Signal.handle(new sun.misc.Signal(name), sig ->
                    Thread.ofPlatform().name("jnbd-shutdown").start(() -> server.stop(Duration.ofSeconds(30))));
            } catch (IllegalArgumentException e) {
                // signal not available on this platform: the JVM's default handling applies
            }
        }
    }

    /** Printed in one write, so that a script watching the output never sees half of it. */
    private static void printBanner(Exports registry, List<SocketAddress> bound, TlsChoice tls) {
        StringBuilder out = new StringBuilder();
        out.append("jnbd: serving ").append(registry.all().size()).append(" export(s); press Ctrl-C to stop\n");
        for (Export e : registry.all()) {
            out.append(String.format("  %-12s %s, %d bytes%s%s%s%n", e.name(), e.backend().describe(), e.backend().size(),
                e.name().equals(registry.defaultName()) ? " (default)" : "",
                e.access() == io.jnbd.server.AllowList.ANYONE ? "" : ", allow " + e.access(),
                e.description().isEmpty() ? "" : " - " + e.description()));
        }
        out.append("Connect with:\n");
        for (SocketAddress a : bound) {
            for (String line : tls.connectLines(a, registry.defaultName())) out.append("  ").append(line).append('\n');
        }
        System.out.print(out);
        System.out.flush();
    }

    /** off, on or require; the message is meant for the user. */
    private static ServerTls.Mode mode(String text) {
        try {
            return ServerTls.parseMode(text);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--tls " + e.getMessage());
        }
    }

    static String hostForUri(InetSocketAddress a) {
        String h = a.getHostString();
        if (h.equals("0.0.0.0")) return "127.0.0.1";
        return h.contains(":") ? "[" + h + "]" : h;
    }
}
