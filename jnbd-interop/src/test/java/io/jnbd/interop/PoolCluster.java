package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.Random;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.function.Predicate;

/**
 * A memory pool as a user runs it: three {@code jnbd memserver} processes and a {@code jnbd serve} whose export
 * {@code swap} is a pool over them, with 2 copies of every extent and a memory server taken as lost after 2 s,
 * all on free loopback ports. It reads the pool's state ({@code swap/status}) and each memory server's
 * ({@code status}) as JSON over {@link RawNbdClient}, waits (bounded) for states, writes and checks seeded
 * data through the pool, and {@link #close()} kills every process it started, stopped ones included.
 */
final class PoolCluster implements AutoCloseable {

    static final String EXPORT = "swap";
    static final int SERVERS = 3;
    static final int GRACE_SECONDS = 3;
    static final int SERVER_TIMEOUT_SECONDS = 2;
    /** The pool's default extent: the unit of placement and recovery. */
    static final int EXTENT = 4 << 20;
    static final int MiB = 1 << 20;
    static final int SIGKILL_EXIT = 128 + 9;
    private static final List<String> MEMSERVER_ARGS = List.of("--memory", "512M", "--grace", Integer.toString(GRACE_SECONDS));
    private static final Duration START_TIMEOUT = Duration.ofSeconds(90);

    private final Path dir;
    /** The memory servers' options: MEMSERVER_ARGS, and what {@link #withMemserverArgs} adds. */
    private final List<String> memserverArgs = new ArrayList<>(MEMSERVER_ARGS);
    /** On loopback, where every client is trusted, the status lists the clients (by instance fingerprint) to anyone. */
    private String statusClients = "anyone";
    private final JnbdServer[] memservers = new JnbdServer[SERVERS];
    /** Every process ever started, restarted memory servers too: close() ends them all. */
    private final List<JnbdServer> started = new CopyOnWriteArrayList<>();
    private JnbdServer serve;

    PoolCluster(Path dir) {
        this.dir = dir;
    }

    /** Adds options to every memory server this cluster starts (TLS, say); before {@link #start}. */
    PoolCluster withMemserverArgs(String... args) {
        memserverArgs.addAll(List.of(args));
        return this;
    }

    /** Who the memory servers list their clients to (--status-clients); before {@link #start}. */
    PoolCluster withStatusClients(String who) {
        statusClients = who;
        return this;
    }

    private String[] memserverCommandLine() {
        List<String> args = new ArrayList<>(memserverArgs);
        args.addAll(List.of("--status-clients", statusClients));
        return args.toArray(String[]::new);
    }

    /**
     * Starts the three memory servers (at once: each is a JVM) and then {@code jnbd serve} with
     * {@code swap=pool:A,B,C,size=SIZE,replicas=2,server-timeout=2} plus {@code extraOptions}, and waits until the
     * pool reports every memory server up.
     */
    PoolCluster start(String size, String... extraOptions) throws Exception {
        startMemservers();
        StringBuilder spec = new StringBuilder(EXPORT + "=pool:").append(addresses());
        spec.append(",size=").append(size).append(",replicas=2,server-timeout=").append(SERVER_TIMEOUT_SECONDS);
        for (String option : extraOptions) spec.append(',').append(option);
        serve = JnbdServer.start(dir.resolve("serve"), "--export", spec.toString());
        started.add(serve);
        awaitPool(START_TIMEOUT, "every memory server up after the start",
            s -> s.servers().stream().allMatch(v -> v.state().equals("up")));
        return this;
    }

    /**
     * Starts the three memory servers only (at once: each is a JVM), for a test that runs its own {@code jnbd serve}
     * with pools over them ({@link #addresses()}); {@link #close()} still ends them.
     */
    PoolCluster startMemservers() throws Exception {
        try (ExecutorService starter = Executors.newVirtualThreadPerTaskExecutor()) {
            List<Future<JnbdServer>> starting = new ArrayList<>();
            for (int i = 0; i < SERVERS; i++) {
                Path work = dir.resolve("memserver-" + i);
                starting.add(starter.submit(() -> {
                    JnbdServer m = JnbdServer.memserver(work, memserverCommandLine());
                    started.add(m);
                    return m;
                }));
            }
            for (int i = 0; i < SERVERS; i++) memservers[i] = join(starting.get(i));
        }
        return this;
    }

    /** HOST:PORT,HOST:PORT,HOST:PORT of the memory servers: what follows {@code pool:} in an export spec. */
    String addresses() {
        StringBuilder list = new StringBuilder();
        for (int i = 0; i < SERVERS; i++) list.append(i == 0 ? "" : ",").append(address(i));
        return list.toString();
    }

    private static JnbdServer join(Future<JnbdServer> f) throws Exception {
        try {
            return f.get();
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Exception cause) throw cause;
            if (e.getCause() instanceof Error error) throw error;
            throw e;
        }
    }

    JnbdServer serve() {
        return serve;
    }

    JnbdServer memserver(int i) {
        return memservers[i];
    }

    /** HOST:PORT of memory server i, as the pool's status names it. */
    String address(int i) {
        return "127.0.0.1:" + memservers[i].port();
    }

    /** nbd://127.0.0.1:PORT/swap */
    String uri() {
        return serve.uri(EXPORT);
    }

    /** SIGKILL to memory server i; waits until it is gone. */
    void kill9(int i) throws InterruptedException {
        JnbdServer m = memservers[i];
        m.kill9();
        OptionalInt status = m.awaitExit(Duration.ofSeconds(10));
        assertThat(status).as("exit status of memory server %d (pid %d) after SIGKILL", i, m.pid()).hasValue(SIGKILL_EXIT);
    }

    /** A new memory server on the port of memory server i (which must be dead): empty, a new incarnation. */
    JnbdServer restart(int i) throws IOException, InterruptedException {
        JnbdServer old = memservers[i];
        assertThat(old.process().isAlive()).as("memory server %d still runs", i).isFalse();
        JnbdServer fresh = JnbdServer.memserverOn(old.workDir(), old.port(), memserverCommandLine());
        started.add(fresh);
        memservers[i] = fresh;
        return fresh;
    }

    // ---- the pool's state ----

    record ServerView(String address, String state, String incarnation, long extents, String lastError) {}

    /** {@code restored}: extents recovery has given a new copy since the pool started. */
    record PoolView(String json, long placed, long belowReplicas, long lost, long restored, List<ServerView> servers) {
        ServerView server(String address) {
            return servers.stream().filter(s -> s.address().equals(address)).findFirst()
                .orElseThrow(() -> new AssertionError("no server " + address + " in the pool status: " + json));
        }

        /** Copies held on servers that are up: 2 per placed extent once every extent has its 2 copies. */
        long copiesUp() {
            return servers.stream().filter(s -> s.state().equals("up")).mapToLong(ServerView::extents).sum();
        }
    }

    PoolView poolStatus() throws IOException {
        String json = document(serve.port(), EXPORT + "/status");
        Map<String, Object> m = JsonDoc.object(json);
        List<ServerView> servers = new ArrayList<>();
        for (Object o : (List<?>) m.get("servers")) {
            Map<?, ?> s = (Map<?, ?>) o;
            servers.add(new ServerView((String) s.get("address"), (String) s.get("state"), (String) s.get("incarnation"),
                ((Number) s.get("extents")).longValue(), (String) s.get("last_error")));
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> recovery = (Map<String, Object>) m.get("recovery");
        return new PoolView(json, number(m, "placed"), number(m, "below_replicas"), number(m, "lost"),
            number(recovery, "extents_restored"), servers);
    }

    /** Polls swap/status until the condition holds; fails after {@code bound}, with the last status and the logs. */
    PoolView awaitPool(Duration bound, String what, Predicate<PoolView> condition) throws InterruptedException {
        long deadline = System.nanoTime() + bound.toNanos();
        String last = "(no status read)";
        while (true) {
            try {
                PoolView s = poolStatus();
                if (condition.test(s)) return s;
                last = s.json();
            } catch (IOException | RuntimeException e) {
                last = "(status unreadable: " + e + ")";
            }
            if (System.nanoTime() > deadline) {
                fail("the pool did not reach this state within %s: %s%nlast status:%n%s%n%s", bound, what, last, logs());
            }
            Thread.sleep(100);
        }
    }

    // ---- a memory server's state ----

    record ClientView(long client, String instanceFingerprint, long connections, long bytes, double graceLeftSeconds) {}

    record MemView(String json, String incarnation, long ramUsed, long free, List<ClientView> clients) {
        /** Bytes stored by every client together. */
        long bytes() {
            return clients.stream().mapToLong(ClientView::bytes).sum();
        }
    }

    MemView memStatus(int i) throws IOException {
        String json = document(memservers[i].port(), "status");
        Map<String, Object> m = JsonDoc.object(json);
        List<ClientView> clients = new ArrayList<>();
        for (Object o : (List<?>) m.get("clients")) {
            Map<?, ?> c = (Map<?, ?>) o;
            clients.add(new ClientView(((Number) c.get("client")).longValue(), (String) c.get("instance_fingerprint"),
                ((Number) c.get("connections")).longValue(), ((Number) c.get("bytes")).longValue(),
                ((Number) c.get("grace_left_seconds")).doubleValue()));
        }
        return new MemView(json, (String) m.get("incarnation"), number(m, "ram_used"), number(m, "free"), clients);
    }

    /** Polls memory server i's status until the condition holds; fails after {@code bound}. */
    MemView awaitMem(int i, Duration bound, String what, Predicate<MemView> condition) throws InterruptedException {
        long deadline = System.nanoTime() + bound.toNanos();
        String last = "(no status read)";
        while (true) {
            try {
                MemView s = memStatus(i);
                if (condition.test(s)) return s;
                last = s.json();
            } catch (IOException | RuntimeException e) {
                last = "(status unreadable: " + e + ")";
            }
            if (System.nanoTime() > deadline) {
                fail("memory server %d (%s) did not reach this state within %s: %s%nlast status:%n%s%n%s", i, address(i),
                    bound, what, last, logs());
            }
            Thread.sleep(100);
        }
    }

    /** The bytes of a read-only JSON export, read whole with one NBD_CMD_READ, padding and all. */
    static String document(int port, String export) throws IOException {
        try (RawNbdClient c = RawNbdClient.open(port, export)) {
            c.readTimeout(Duration.ofSeconds(10));
            byte[] bytes = c.read(0, (int) Math.min(c.exportSize, 1 << 20));
            c.disconnect();
            return new String(bytes, StandardCharsets.UTF_8);
        }
    }

    private static long number(Map<String, Object> m, String key) {
        Object v = m.get(key);
        if (!(v instanceof Number n)) throw new IllegalArgumentException("no number '" + key + "' in " + m);
        return n.longValue();
    }

    // ---- data through the pool ----

    /** The seeded bytes of one piece: what {@link #write} puts at {@code offset} and {@link #verify} expects. */
    static byte[] pattern(long seed, long offset, int length) {
        byte[] data = new byte[length];
        new Random(seed * 1_000_003L + offset).nextBytes(data);
        return data;
    }

    /** Writes seeded data to swap in 1 MiB WRITEs; every one must be acknowledged without error. */
    void write(long seed, long offset, long length) throws IOException {
        try (RawNbdClient c = RawNbdClient.open(serve.port(), EXPORT)) {
            for (long at = offset; at < offset + length; at += MiB) {
                int n = (int) Math.min(MiB, offset + length - at);
                int error = c.write(at, pattern(seed, at, n));
                if (error != 0) fail("NBD error %d of the WRITE of %d bytes at %d to the pool%n%s", error, n, at, logs());
            }
            c.disconnect();
        }
    }

    /** Reads swap back in 1 MiB READs and fails at the first byte that is not what {@link #write} wrote. */
    void verify(long seed, long offset, long length, String when) throws IOException {
        try (RawNbdClient c = RawNbdClient.open(serve.port(), EXPORT)) {
            for (long at = offset; at < offset + length; at += MiB) {
                int n = (int) Math.min(MiB, offset + length - at);
                byte[] got = c.read(at, n);
                byte[] want = pattern(seed, at, n);
                int diff = Arrays.mismatch(got, want);
                if (diff >= 0) {
                    fail("%s: byte %d of the pool reads 0x%02x, was written as 0x%02x (%s)", when, at + diff,
                        got[diff] & 0xff, want[diff] & 0xff, allZero(got) ? "the whole MiB reads as zeroes" : "data differs");
                }
            }
            c.disconnect();
        }
    }

    private static boolean allZero(byte[] b) {
        for (byte x : b) if (x != 0) return false;
        return true;
    }

    // ---- diagnostics and cleanup ----

    /** The last lines of every log, for failure messages. */
    String logs() {
        StringBuilder out = new StringBuilder();
        if (serve != null) out.append(tail("serve", serve.log()));
        for (int i = 0; i < SERVERS; i++) {
            if (memservers[i] != null) out.append(tail("memserver " + i + " (" + address(i) + ")", memservers[i].log()));
        }
        return out.toString();
    }

    private static String tail(String name, String log) {
        List<String> lines = log.lines().filter(l -> !l.contains("'status'") && !l.contains("'" + EXPORT + "/status'")).toList();
        return "--- " + name + ", last lines (status reads left out):\n"
            + String.join("\n", lines.subList(Math.max(0, lines.size() - 40), lines.size())) + "\n";
    }

    /** SIGCONT to any stopped process, then SIGKILL to every process started: nothing is left behind, stopped or not. */
    @Override
    public void close() throws InterruptedException {
        for (JnbdServer s : started) {
            try {
                if (s.suspended()) s.resume();
            } catch (RuntimeException | AssertionError e) {
                System.err.println("cleanup: SIGCONT to " + s.pid() + ": " + e);
            }
        }
        for (JnbdServer s : started) s.kill();
    }
}
