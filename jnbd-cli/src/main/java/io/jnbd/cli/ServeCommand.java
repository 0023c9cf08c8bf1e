package io.jnbd.cli;

import java.io.PrintWriter;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import org.slf4j.LoggerFactory;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

@Command(name = "serve", mixinStandardHelpOptions = true, sortOptions = false,
    description = {
        "Serve files, block devices and memory over the NBD protocol.",
        "",
        "With no --export and no --config, serves export 'default' (also the empty",
        "name): ./jnbd-data/default.img, 1 GiB sparse, created on first run, on",
        "127.0.0.1:10809.",
        "",
        "An export SPEC is file:PATH, memory:SIZE, pool:HOST:PORT,... or nbd:URI,",
        "then comma-separated options:",
        "  size=SIZE          create the file if missing, grow it if smaller (file:);",
        "                     the virtual disk's size (pool:)",
        "  readonly           refuse writes, trims and zeroes with EPERM (short for",
        "                     filter=readonly, outermost)",
        "  filter=NAME        put a filter in front of the backend; repeatable, the",
        "                     first named meets a request first (nbdkit's order);",
        "                     each filter's keys, named as nbdkit names them, follow:",
        "                     readonly  (no keys)",
        "                     delay     delay-read=, delay-write=, delay-zero=,",
        "                               delay-trim=, delay-extents=, delay-cache=,",
        "                               delay-flush=, rdelay=, wdelay= (10ms, 1.5s)",
        "                     error     error=EIO|ENOSPC|..., error-rate=10%%,",
        "                               error-file=PATH, error-pread[-rate|-file]=",
        "                               and so on per command, error-offset=,",
        "                               error-length=, error-seed=",
        "                     rate      rate=, connection-rate= (bits/s, 800M),",
        "                               rate-file=, connection-rate-file=,",
        "                               burstiness= (seconds, default 2)",
        "                     cache     cache=writeback|writethrough|unsafe,",
        "                               cache-max-size=, cache-on-read=true|/PATH,",
        "                               cache-min-block-size=, cache-high-threshold=,",
        "                               cache-low-threshold=",
        "                     cow       cow-dir=DIR, cow-overlay=shared|connection|",
        "                               client|identity, cow-block-size= (64K);",
        "                               with client, EXPORT/NAME is NAME's own disk",
        "                     (docs/server.md, Filters)",
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
        "An nbd: export serves another NBD server's export (nbd://, nbds:// with TLS,",
        "nbd+unix:// URIs), which must be up when the server starts:",
        "  connections=N      connections to an upstream with multi-conn (default 4)",
        "  timeout=DURATION   an upstream request unanswered this long fails with",
        "                     EIO, and the next request connects again (default 30s)",
        "  connect-timeout=DURATION  bound on each attempt to connect (default 10s)",
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
        "  jnbd serve --config /etc/jnbd.toml",
        "  jnbd serve --config /etc/jnbd.toml --check",
        "  jnbd serve --export disk=file:disk.img --metrics 127.0.0.1:9810",
        "  jnbd serve -e 'd=memory:1G,filter=delay,rdelay=5ms,filter=error,error-rate=1%%'",
        "  jnbd serve --export swap=pool:10.0.0.1:10810,10.0.0.2:10810,10.0.0.3:10810,size=8G",
        "  jnbd serve -e 'boot=file:base.img,filter=cow,cow-overlay=client,cow-dir=/var/lib/jnbd/boot'",
        "             (each client opens boot/NAME: its own persistent overlay of base.img)",
        "  jnbd serve -e 'p=nbd:nbd://far.example.com/disk,filter=rate,rate=800M,filter=cache,cache-on-read=true'",
        "  jnbd serve --tls require --tls-certificates /etc/pki/jnbd --tls-verify-peer \\",
        "             --export 'disk=file:/var/lib/vm.img,allow=alice;10.0.0.0/8'",
        "  jnbd serve --tls require --tls-psk /etc/jnbd/keys.psk --export scratch=memory:4G",
        "  jnbd serve --control=/run/jnbd.ctl \\",
        "             -e 'vm0=file:vm0.img,filter=dirty,dirty-bitmap=b0'",
        "             (then: jnbd bitmap rotate --control=/run/jnbd.ctl vm0 b0 b1)",
        "",
        "Connect with:",
        "  nbdinfo --list nbd://127.0.0.1:10809",
        "  qemu-img info nbd://127.0.0.1:10809/default",
        "  nbd-client -N default 127.0.0.1 10809 /dev/nbd0",
        "  nbdinfo 'nbds://127.0.0.1:10809/disk?tls-certificates=/etc/pki/jnbd-client'",
        "  nbdinfo 'nbds://alice@127.0.0.1:10809/scratch?tls-psk-file=/etc/jnbd/keys.psk'",
        "",
        "SIGINT or SIGTERM: drain: stop accepting, answer the requests already read",
        "(later ones get ESHUTDOWN), flush, close, exit 0, within --drain-timeout; a",
        "second signal ends the drain at once. SIGHUP: read the --config file again",
        "and apply its exports and default export (listeners, TLS and the other",
        "settings take a restart); a file with a mistake is refused whole and the",
        "exports stay as they were.",
        "",
        "Under systemd's socket activation (LISTEN_FDS), the sockets systemd passes",
        "are served instead of --listen and --unix: docs/examples/systemd/ has the",
        "unit files."})
public final class ServeCommand implements Callable<Integer> {
    // The option fields hold the command line as picocli parsed it, and are never read directly: ServeSettings
    // reads them through picocli's model, merged with the config file, so that every option is also a key of
    // the file and a reload can merge again. A new option needs its field here and, if its type is not check
    // enough, one line in SettingChecks.

    @Option(names = "--listen", paramLabel = "HOST:PORT",
        description = "TCP address to listen on; repeatable (default 127.0.0.1:10809 unless only --unix is given)")
    List<String> listen = new ArrayList<>();

    @Option(names = "--unix", paramLabel = "PATH", description = "Unix socket to listen on; repeatable")
    List<Path> unix = new ArrayList<>();

    @Option(names = {"-e", "--export"}, paramLabel = "NAME=SPEC", description = "an export; repeatable (see SPEC above)")
    List<String> exports = new ArrayList<>();

    @Option(names = "--config", paramLabel = "FILE",
        description = "read the settings from FILE, TOML: every option below is a key, its long name without the "
            + "dashes ('backlog = 4096', 'listen = [\"0.0.0.0:10809\"]'), and the exports a table "
            + "('[export]' then 'disk = \"file:/var/lib/vm.img,mode=direct\"'); an option on the command line wins "
            + "over the file (an --export over the file's export of that name). docs/server.md has a full example")
    Path config;

    @Option(names = "--check",
        description = "check the settings (the command line over the --config file over the defaults), print them as "
            + "a config file and exit: 0 when they are good, 2 with one line saying what is wrong; nothing is opened "
            + "or bound")
    boolean check;

    @Spec
    CommandSpec spec;

    @Option(names = "--tls", paramLabel = "off|on|require", defaultValue = "off",
        description = "off: refuse STARTTLS; on: offer TLS, plain clients still served; require: every option "
            + "before STARTTLS gets NBD_REP_ERR_TLS_REQD (default ${DEFAULT-VALUE})")
    String tls;

    @Option(names = "--tls-certificates", paramLabel = "DIR",
        description = "X.509: DIR holds ca-cert.pem, server-cert.pem, server-key.pem and optionally ca-crl.pem")
    Path tlsCertificates;

    @Option(names = "--tls-verify-peer", arity = "0..1", paramLabel = "true|false", defaultValue = "false", fallbackValue = "true",
        description = "X.509: require a client certificate signed by ca-cert.pem")
    boolean tlsVerifyPeer;

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

    @Option(names = "--receive-timeout", paramLabel = "SECONDS", defaultValue = "30",
        description = "drop a client that sent part of a request (a header, a write payload) and then nothing "
            + "for this long, giving back the buffers it holds; clients idle between requests stay "
            + "(default ${DEFAULT-VALUE})")
    int receiveTimeout;

    @Option(names = "--drain-timeout", paramLabel = "SECONDS", defaultValue = "30",
        description = "at SIGTERM or SIGINT, wait this long for the requests already read to be answered (later "
            + "ones get ESHUTDOWN) before closing every connection; a second signal ends the wait at once; 0 closes "
            + "at once (default ${DEFAULT-VALUE})")
    int drainTimeout;

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
        description = "socket send buffer of TCP clients. auto: 256K for plain-text clients on this host, where it "
            + "saves server CPU at no cost in throughput, the kernel's autotuning for remote and TLS ones; kernel: autotuning "
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

    @Option(names = "--metrics", paramLabel = "HOST:PORT",
        description = "serve Prometheus metrics over HTTP at http://HOST:PORT/metrics: requests, bytes, errors and "
            + "request times per export, connections, buffer memory, I/O queue (default: off)")
    String metrics;

    @Option(names = "--control", paramLabel = "PATH",
        description = "listen on the Unix socket PATH for 'jnbd bitmap' (changed-block tracking checkpoints); mode 0600: "
            + "only this server's user and root may use it, checked again per connection (docs/security.md) (default: off)")
    Path control;

    @Option(names = "--data-dir", paramLabel = "DIR", defaultValue = "jnbd-data",
        description = "directory of the embedded default export's default.img (default ./${DEFAULT-VALUE})")
    Path dataDir;

    @Override
    public Integer call() throws Exception {
        PrintWriter err = spec.commandLine().getErr();
        ServeSettings settings;
        try {
            settings = ServeSettings.resolve(spec, config);
        } catch (ConfigException e) {
            err.println(e.inFile() ? e.getMessage() : "jnbd serve: " + e.getMessage());
            return 2;
        }
        if (check) {
            try {
                settings.tls().load(); // the files must be readable and fit together
            } catch (io.jnbd.tls.TlsConfigException e) {
                err.println("jnbd serve: " + e.getMessage());
                return 2;
            }
            spec.commandLine().getOut().print(settings.toToml());
            spec.commandLine().getOut().flush();
            return 0;
        }
        Serving serving;
        try {
            serving = Serving.open(spec, settings);
            // Before the first listener: a SIGTERM that arrives as soon as the port accepts must still exit 0.
            installSignalHandlers(serving, Duration.ofSeconds(settings.integer("drain-timeout")));
            if (serving.listen()) {
                spec.commandLine().getOut().print(serving.banner());
                spec.commandLine().getOut().flush();
            }
        } catch (Serving.StartFailed e) {
            err.println("jnbd serve: " + e.getMessage());
            return e.exitCode();
        }
        serving.server().awaitStop();
        serving.closeEndpoints();
        return 0;
    }

    /** For memserver, which takes the same HOST:PORT. */
    static InetSocketAddress parseHostPort(String s) {
        return SettingChecks.parseHostPort(s);
    }

    /**
     * SIGINT and SIGTERM mean a drain and exit status 0, not the JVM's 130/143; a second one ends the drain at once
     * (systemd's stop sends one SIGTERM, an impatient operator a second). SIGHUP means a reload instead of the
     * JVM's exit. sun.misc.Signal is in the exported jdk.unsupported module: no --add-exports needed.
     */
    @SuppressWarnings("restriction")
    private static void installSignalHandlers(Serving serving, Duration drainTimeout) {
        var signals = new java.util.concurrent.atomic.AtomicInteger();
        for (String name : List.of("INT", "TERM")) {
            try {
                sun.misc.Signal.handle(new sun.misc.Signal(name), sig -> {
                    if (signals.getAndIncrement() == 0) {
                        Thread.ofPlatform().name("jnbd-shutdown").start(() -> serving.stop(drainTimeout));
                    } else {
                        LoggerFactory.getLogger(ServeCommand.class).warn("SIG{} again: ending the drain now", sig.getName());
                        serving.server().endDrainNow();
                    }
                });
            } catch (IllegalArgumentException e) {
                // signal not available on this platform: the JVM's default handling applies
            }
        }
        try {
            sun.misc.Signal.handle(new sun.misc.Signal("HUP"), sig -> Thread.ofPlatform().name("jnbd-reload").start(serving::reload));
        } catch (IllegalArgumentException e) {
            // no SIGHUP here: no reload by signal
        }
    }

    static String hostForUri(InetSocketAddress a) {
        String h = a.getHostString();
        if (h.equals("0.0.0.0")) return "127.0.0.1";
        return h.contains(":") ? "[" + h + "]" : h;
    }
}
