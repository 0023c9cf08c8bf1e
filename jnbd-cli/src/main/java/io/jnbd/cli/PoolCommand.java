package io.jnbd.cli;

import com.fasterxml.jackson.databind.node.ArrayNode;
import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;
import io.jnbd.pool.PoolStatus;
import io.jnbd.pool.memserver.MemServerStatus;
import io.jnbd.tls.TlsClientSettings;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/** {@code jnbd pool status}: the state of a pool export, or of memory servers. */
@Command(name = "pool", mixinStandardHelpOptions = true,
    description = "Look at a memory pool (see 'jnbd pool status --help').",
    subcommands = {PoolCommand.Status.class, CommandLine.HelpCommand.class})
public final class PoolCommand implements Runnable {
    @Override
    public void run() {
        CommandLine.usage(this, System.out);
    }

    @Command(name = "status", mixinStandardHelpOptions = true,
        description = {
            "Show the state of a pool export or of memory servers.",
            "A pool export: its memory servers, how many extents each holds, extents",
            "below their number of copies or lost, and recovery progress. Memory",
            "servers: memory and spill in use, and each client's space.",
            "",
            "TARGET is the pool export's URI, nbd[s]://HOST:PORT/NAME, whose server serves",
            "NAME/status; or HOST:PORT of one or more memory servers (over TLS with",
            "--tls-psk-file or --tls-certificates). A memory server lists its clients",
            "only to the readers its --status-clients names, and never their instances.",
            ""},
        footer = {"", "Examples:",
            "  jnbd pool status nbd://127.0.0.1:10809/swap",
            "  jnbd pool status 127.0.0.1:10810 127.0.0.1:10811 127.0.0.1:10812",
            "  jnbd pool status --tls-psk-file /etc/jnbd/pool.psk --tls-username ops 10.0.0.5:10810",
            "  jnbd pool status --json nbd://127.0.0.1:10809/swap | jq .below_replicas"})
    static final class Status implements Callable<Integer> {
        @Parameters(paramLabel = "TARGET", arity = "1..*", description = "a pool export's URI, or memory servers' HOST:PORT")
        List<String> targets;

        @Option(names = "--json", description = "print JSON instead of text")
        boolean json;

        @Option(names = "--tls-certificates", paramLabel = "DIR",
            description = "memory servers over TLS, X.509: DIR holds ca-cert.pem (and client-cert.pem, client-key.pem)")
        java.nio.file.Path tlsCertificates;

        @Option(names = "--tls-psk-file", paramLabel = "FILE", description = "memory servers over TLS with a pre-shared key from FILE")
        java.nio.file.Path tlsPskFile;

        @Option(names = "--tls-username", paramLabel = "IDENTITY", description = "the PSK identity to use from --tls-psk-file")
        String tlsUsername;

        @picocli.CommandLine.Spec
        picocli.CommandLine.Model.CommandSpec spec;

        /** What --json prints for a memory server that did not answer, in place of its status. */
        record Unreachable(String address, String error) {}

        @Override
        public Integer call() throws Exception {
            PrintWriter out = spec.commandLine().getOut();
            if (targets.size() == 1 && NbdUri.looksLikeUri(targets.getFirst())) {
                NbdUri pool = NbdUri.parse(targets.getFirst());
                NbdUri status = pool.withExport(pool.exportName() + "/status");
                byte[] doc = readDocument(status, null);
                if (json) out.println(new String(doc, StandardCharsets.UTF_8).strip());
                else printPool(out, pool, PoolStatus.parse(doc));
                out.flush();
                return 0;
            }
            ArrayNode docs = Json.array();
            int failed = 0;
            TlsClientSettings tls = tlsCertificates == null && tlsPskFile == null ? null
                : new TlsClientSettings(tlsCertificates, tlsPskFile, tlsUsername, true, null);
            for (String t : targets) {
                NbdUri u = NbdUri.parse("nbd://" + t + "/status");
                try {
                    byte[] doc = readDocument(u, tls);
                    if (json) docs.add(Json.parse(new String(doc, StandardCharsets.UTF_8).strip()));
                    else printServer(out, t, MemServerStatus.parse(doc));
                } catch (IOException e) {
                    failed++;
                    if (json) docs.add(Json.tree(new Unreachable(t, e.getMessage())));
                    else out.println("memory server " + t + ": " + e.getMessage());
                }
            }
            if (json) out.println(Json.indented(docs));
            out.flush();
            return failed == 0 ? 0 : 1;
        }

        private static byte[] readDocument(NbdUri uri, TlsClientSettings tls) throws IOException {
            try (NbdClient c = NbdClient.connect(uri, ClientOptions.defaults().withConnectTimeout(Duration.ofSeconds(5))
                    .withRequestTimeout(Duration.ofSeconds(5)).withTls(tls))) {
                ByteBuffer buf = ByteBuffer.allocate((int) Math.min(c.size(), 1 << 20));
                c.blocking().read(0, buf);
                return buf.array();
            }
        }

        private static void printPool(PrintWriter out, NbdUri uri, PoolStatus s) {
            out.printf("pool %s: %s, %d copies of %s extents (client %d, unit %d)%n", uri, Sizes.human(s.size()),
                s.replicas(), Sizes.human(s.extentSize()), s.client(), s.unit());
            out.printf("  extents: %d, written %d, below %d copies %d, lost %d%n", s.extents(), s.placed(), s.replicas(),
                s.belowReplicas(), s.lost());
            var r = s.recovery();
            out.printf("  recovery: %d queued, %d waiting for a server, %d restored, %s copied, %s/s now%n", r.queued(),
                r.waiting(), r.extentsRestored(), Sizes.human(r.bytesCopied()), Sizes.human(r.bytesPerSecond()));
            out.printf("  %-22s %-5s %-17s %10s %8s %9s%n", "server", "state", "incarnation", "free", "extents", "in flight");
            for (var sv : s.servers()) {
                out.printf("  %-22s %-5s %-17s %10s %8d %9d%s%n", sv.address(), sv.state(),
                    sv.incarnation() == null ? "-" : sv.incarnation(), sv.free() < 0 ? "?" : Sizes.human(sv.free()),
                    sv.extents(), sv.inFlight(), sv.lastError() == null ? "" : "  (" + sv.lastError() + ")");
            }
        }

        private static void printServer(PrintWriter out, String address, MemServerStatus s) {
            out.printf("memory server %s: incarnation %s, up %ds%n", address, s.incarnation(), s.uptimeSeconds());
            out.printf("  RAM %s of %s, spill %s of %s, %s free%n", Sizes.human(s.ramUsed()), Sizes.human(s.ramBytes()),
                Sizes.human(s.spillUsed()), Sizes.human(s.spillBytes()), Sizes.human(s.free()));
            if (s.clients().isEmpty()) {
                out.println(s.moreClients() == 0 ? "  no clients"
                    : "  " + s.moreClients() + " clients, not listed to this reader (the server's --status-clients)");
                return;
            }
            out.printf("  %-7s %-11s %-16s %11s %10s %s%n", "client", "instance", "owner", "connections", "stored", "freed in");
            for (var c : s.clients()) {
                out.printf("  %-7d %-11s %-16s %11d %10s %s%n", c.client(), "~" + c.instanceFingerprint(),
                    c.owner() == null ? "-" : c.owner(), c.connections(), Sizes.human(c.bytes()),
                    c.graceLeftSeconds() < 0 ? "-" : String.format("%.0fs", c.graceLeftSeconds()));
            }
            if (s.moreClients() > 0) out.printf("  ... and %d more clients%n", s.moreClients());
        }
    }
}
