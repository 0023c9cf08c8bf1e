package io.jnbd.cli;

import io.jnbd.server.AllowList;
import io.jnbd.server.Export;
import io.jnbd.server.ExportSet;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.MetricsEndpoint;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ReloadableExports;
import io.jnbd.server.ServerConfig;
import io.jnbd.server.ServerTls;
import io.jnbd.server.control.ControlEndpoint;
import io.jnbd.server.net.Listener;
import io.jnbd.server.net.SocketActivation;
import io.jnbd.tls.TlsConfigException;
import java.io.IOException;
import java.net.BindException;
import java.net.SocketAddress;
import java.nio.file.AccessDeniedException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import picocli.CommandLine.Model.CommandSpec;

/**
 * A running {@code jnbd serve}: its server, its exports, and the reload that SIGHUP asks for. A reload reads the
 * config file again under the same command line and serves the exports it names: added ones appear, removed
 * ones refuse new clients while their connections go on, changed ones apply to new connections. Listeners, TLS
 * and the server's limits stay as they started; a reload says which of them the file changed.
 */
final class Serving {
    private static final Logger log = LoggerFactory.getLogger(Serving.class);

    /** Start-up failed: the message for the user, and the exit status (2: the settings, 1: the system). */
    static final class StartFailed extends Exception {
        private final int exitCode;

        StartFailed(int exitCode, String message) {
            super(message, null, false, false);
            this.exitCode = exitCode;
        }

        int exitCode() {
            return exitCode;
        }
    }

    /**
     * What a reload did: whether it applied the file, the line it logged saying so, and the settings the file
     * changed that only a restart applies.
     */
    record Reload(boolean applied, String message, List<String> needRestart) {}

    private final CommandSpec command;
    private final ServeSettings started;
    private final TlsChoice tls;
    private final ReloadableExports registry;
    private final NbdServer server;
    /** The --metrics endpoint, or null. */
    private final MetricsEndpoint metrics;
    /** The --control socket, or null. */
    private final ControlEndpoint control;
    private final List<SocketAddress> bound = new ArrayList<>();
    private ExportSet exports; // guarded by this

    private Serving(CommandSpec command, ServeSettings started, ExportSet exports, NbdServer server,
                    ReloadableExports registry, MetricsEndpoint metrics, ControlEndpoint control) {
        this.command = command;
        this.started = started;
        this.tls = started.tls();
        this.exports = exports;
        this.server = server;
        this.registry = registry;
        this.metrics = metrics;
        this.control = control;
    }

    /**
     * Loads the TLS files and opens the exports of {@code settings}, which {@code command}'s command line and
     * config file gave (a reload resolves them again); nothing listens yet.
     */
    static Serving open(CommandSpec command, ServeSettings settings) throws StartFailed {
        TlsChoice tls = settings.tls();
        warnAboutIdentities(settings.exports(), tls);
        // Before any export is opened (a file export may create its file): a TLS setting that cannot work stops everything.
        ServerTls serverTls;
        try {
            serverTls = tls.load();
        } catch (TlsConfigException e) {
            throw new StartFailed(2, e.getMessage());
        }
        MetricsEndpoint metrics = bindMetrics(settings.string("metrics"));
        ControlEndpoint control;
        try {
            control = bindControl(settings.path("control"));
        } catch (StartFailed e) {
            if (metrics != null) metrics.close();
            throw e;
        }
        ExportSet exports;
        try {
            exports = ExportSet.open(settings.exports(), settings.string("default-export"));
        } catch (ExportSet.OpenFailed e) {
            close(metrics, control);
            throw new StartFailed(1, describe(e));
        } catch (IllegalArgumentException e) {
            close(metrics, control);
            throw new StartFailed(2, e.getMessage());
        }
        ServerConfig cfg = settings.serverConfig();
        warnIfTooFewDescriptors(cfg.maxConnections() + cfg.operatorSlots());
        if (serverTls.mode() != ServerTls.Mode.OFF) {
            log.info("TLS {}: {}", serverTls.mode() == ServerTls.Mode.REQUIRE ? "required" : "offered", serverTls.context().describe());
        }
        // A client that found a dropped export in its handshake starts using it within the handshake timeout.
        var registry = new ReloadableExports(exports.exports(), cfg.handshakeTimeout().plusSeconds(1));
        NbdServer server = new NbdServer(registry, cfg, serverTls);
        if (metrics != null) metrics.expose(server);
        // The registry, not the set: a request after a reload (SIGHUP) finds the exports as they are then.
        if (control != null) control.serve(registry);
        return new Serving(command, settings, exports, server, registry, metrics, control);
    }

    /**
     * Binds --metrics (null: off) before any export is opened, so that a port in use stops the start as cleanly
     * as a malformed address.
     */
    private static MetricsEndpoint bindMetrics(String hostPort) throws StartFailed {
        if (hostPort == null) return null;
        try {
            return MetricsEndpoint.bind(SettingChecks.resolvedHostPort(hostPort));
        } catch (IOException e) {
            throw new StartFailed(2, "--metrics: cannot listen on " + hostPort + ": "
                + (e instanceof BindException ? e.getMessage().replace(" (Bind failed)", "") : describe(e)));
        }
    }

    /**
     * Binds --control (null: off) before any export is opened: a socket another server listens on stops the start
     * before this one has touched a disk.
     */
    private static ControlEndpoint bindControl(Path path) throws StartFailed {
        if (path == null) return null;
        try {
            return ControlEndpoint.bind(path);
        } catch (IOException e) {
            throw new StartFailed(2, "--control: " + describe(e));
        }
    }

    private static void close(MetricsEndpoint metrics, ControlEndpoint control) {
        if (metrics != null) metrics.close();
        if (control != null) control.close();
    }

    /** Stops serving /metrics and the control socket (removing its file); the server has stopped. */
    void closeEndpoints() {
        close(metrics, control);
    }

    /**
     * What SIGINT and SIGTERM do: the control socket goes first, so that no bitmap change reaches an export being
     * closed; then the server stops as {@link NbdServer#stop} says.
     */
    void stop(Duration grace) {
        if (control != null) control.close();
        server.stop(grace);
    }

    /**
     * Opens every listener and starts the statistics. A failure to bind stops the server; false when it was
     * stopped (a signal) before all were open.
     */
    boolean listen() throws StartFailed {
        List<Listener> passed;
        try {
            passed = SocketActivation.inherited();
        } catch (SocketActivation.Unusable e) {
            server.stop(Duration.ZERO);
            closeEndpoints();
            throw new StartFailed(1, "socket activation: " + e.getMessage());
        }
        if (!passed.isEmpty()) {
            // systemd bound the sockets and keeps them across restarts: they replace --listen and --unix.
            log.info("socket activation: serving the {} socket(s) passed (LISTEN_FDS); --listen and --unix are not bound",
                passed.size());
            for (Listener l : passed) {
                try {
                    bound.add(server.serve(l));
                } catch (IOException e) {
                    return false; // stopping already: serve closed it
                }
            }
            startStats();
            return true;
        }
        for (SocketAddress a : started.addresses()) {
            try {
                bound.add(server.listen(a));
            } catch (IOException e) {
                if (server.isStopping()) return false;
                server.stop(Duration.ZERO);
                closeEndpoints();
                throw new StartFailed(1, "cannot listen on " + NbdServer.describe(a) + ": "
                    + (e instanceof BindException ? e.getMessage().replace(" (Bind failed)", "") : describe(e)));
            }
        }
        startStats();
        return true;
    }

    private void startStats() {
        int stats = started.integer("stats-interval");
        if (stats > 0) server.reportStatsEvery(Duration.ofSeconds(stats));
    }

    NbdServer server() {
        return server;
    }

    List<SocketAddress> bound() {
        return List.copyOf(bound);
    }

    /**
     * Reads the config file again and serves what it says, or, if anything in it is wrong, nothing of it. What
     * SIGHUP does.
     */
    synchronized Reload reload() {
        Path file = started.file();
        if (file == null) {
            log.warn("reload: there is no --config file to read again; nothing changed");
            return new Reload(false, "reload: there is no --config file to read again; nothing changed", List.of());
        }
        ServeSettings next;
        ExportSet set;
        try {
            next = ServeSettings.resolve(command, file);
            set = ExportSet.open(next.exports(), next.string("default-export"), exports);
        } catch (ConfigException | IllegalArgumentException e) {
            return refused("reload of " + file + " refused, the exports stay as they were: " + e.getMessage());
        } catch (ExportSet.OpenFailed e) {
            return refused("reload of " + file + " refused, the exports stay as they were: " + describe(e));
        }
        ExportSet.Changes changes = set.changesFrom(exports);
        String defaultBefore = exports.exports().defaultName();
        registry.replace(set.exports());
        exports = set;
        List<ExportSpec> touched = new ArrayList<>();
        for (String name : changes.added()) touched.add(set.specs().get(name));
        for (String name : changes.changed()) touched.add(set.specs().get(name));
        warnAboutIdentities(touched, tls);

        List<String> restart = next.restartNeeded(started);
        if (!restart.isEmpty()) {
            log.warn("reload of {}: {} changed, which takes effect only at a restart; the server goes on with what it started with",
                file, String.join(", ", restart));
        }
        String defaultNow = set.exports().defaultName();
        String message = "reloaded " + file + ": " + summary(changes)
            + (defaultNow.equals(defaultBefore) ? "" : "; the default export is now '" + defaultNow + "'")
            + " (a reload applies exports and the default export; listeners, TLS and the other settings take a restart)";
        log.info(message);
        return new Reload(true, message, restart);
    }

    private static String summary(ExportSet.Changes c) {
        if (c.none()) return "no export changed";
        List<String> parts = new ArrayList<>();
        if (!c.added().isEmpty()) parts.add("added " + String.join(", ", c.added()));
        if (!c.removed().isEmpty()) {
            parts.add("removed " + String.join(", ", c.removed()) + " (new clients are refused, connected ones go on)");
        }
        if (!c.changed().isEmpty()) {
            parts.add("changed " + String.join(", ", c.changed()) + " (for new connections"
                + (c.reopened().isEmpty() ? "" : "; reopened " + String.join(", ", c.reopened())) + ")");
        }
        return String.join("; ", parts);
    }

    private static Reload refused(String message) {
        log.error(message);
        return new Reload(false, message, List.of());
    }

    /** Printed in one write, so that a script watching the output never sees half of it. */
    String banner() {
        Exports registry = this.registry.current();
        Collection<Export> all = registry.all();
        StringBuilder out = new StringBuilder();
        out.append("jnbd: serving ").append(all.size()).append(" export(s); press Ctrl-C to stop\n");
        for (Export e : all) {
            out.append(String.format("  %-12s %s, %d bytes%s%s%s%n", e.name(), e.backend().describe(), e.backend().size(),
                e.name().equals(registry.defaultName()) ? " (default)" : "",
                e.access() == AllowList.ANYONE ? "" : ", allow " + e.access(),
                e.description().isEmpty() ? "" : " - " + e.description()));
        }
        out.append("Connect with:\n");
        for (SocketAddress a : bound) {
            for (String line : tls.connectLines(a, registry.defaultName())) out.append("  ").append(line).append('\n');
        }
        if (control != null) out.append("Control socket: jnbd bitmap list --control=").append(control.path()).append(" EXPORT\n");
        return out.toString();
    }

    private static void warnAboutIdentities(List<ExportSpec> specs, TlsChoice tls) {
        if (tls.mode() != ServerTls.Mode.OFF) return;
        for (ExportSpec s : specs) {
            if (s.access().namesIdentities()) {
                log.warn("export '{}': allow={} names TLS identities, and TLS is off (--tls): only its address entries "
                    + "can admit anyone", s.name(), s.access());
            }
        }
    }

    /**
     * Each client needs a file descriptor: with fewer than the limit asks for, accept fails once they run out
     * and clients wait in the kernel's queue instead of being told why. The JVM raises its soft limit to the
     * hard one at start, so what /proc shows now is all there is.
     */
    private static void warnIfTooFewDescriptors(int connections) {
        try {
            for (String line : java.nio.file.Files.readAllLines(Path.of("/proc/self/limits"))) {
                if (!line.startsWith("Max open files")) continue;
                String soft = line.substring("Max open files".length()).strip().split("\\s+")[0];
                if (soft.equals("unlimited")) return;
                long limit = Long.parseLong(soft);
                if (limit < connections + 256L) {
                    log.warn("only {} file descriptors (ulimit -n): at most about {} clients can connect, not {}; "
                        + "raise the limit or lower --max-connections", limit, Math.max(0, limit - 256), connections);
                }
                return;
            }
        } catch (IOException | RuntimeException e) {
            // not Linux, or no /proc: nothing to check against
        }
    }

    private static String describe(ExportSet.OpenFailed e) {
        return "export '" + e.spec().name() + "': cannot open " + e.spec().target() + ": " + describe(e.getCause());
    }

    private static String describe(IOException e) {
        if (e instanceof NoSuchFileException n) return n.getReason() != null ? n.getReason() : "no such file";
        if (e instanceof AccessDeniedException) return "permission denied";
        return e.getMessage() != null ? e.getMessage() : e.toString();
    }
}
