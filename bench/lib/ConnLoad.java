/*
 * ConnLoad: many NBD client connections from one process, for bench/conns.
 *
 * A single-file Java program (run it with the JDK's source launcher: `java bench/lib/ConnLoad.java ...`) that
 * depends on the JDK only, not on jnbd, so that it is independent of the server under test. All connections
 * are non-blocking NIO channels served by one Selector thread: 10,000 connections cost it a few MiB and a
 * fraction of a core, not 10,000 threads.
 *
 * It speaks the NBD fixed newstyle handshake itself (doc/proto.md of NetworkBlockDevice/nbd): the 18-byte
 * greeting (NBDMAGIC, IHAVEOPT, handshake flags), client flags FIXED_NEWSTYLE|NO_ZEROES, NBD_OPT_GO for the
 * export name given (default "", the default export) with no information requests, option replies up to
 * NBD_REP_ACK (NBD_REP_INFO / NBD_INFO_EXPORT gives the size; a reply type with bit 31 set is an error).
 * Structured replies are not negotiated, so a read's reply is the simple reply (0x67446698, error, cookie)
 * followed by the data.
 *
 * Modes:
 *   --mode many   --conns N: N connections, opened --batch at a time (a sliding window of handshakes in
 *                 progress); once all have finished or failed their handshake, each reads 4 KiB at a random
 *                 4 KiB-aligned offset every --interval-ms (the first read of each at a random point of the
 *                 first interval, so the reads spread over it) for --duration seconds. A read whose
 *                 previous one has not been answered yet goes out as soon as that answer arrives (counted
 *                 as late). Latency is measured from sending the request to the last byte of the reply.
 *   --mode idle   --readers R connections doing 4 KiB random reads at queue depth 1 back to back for
 *                 --duration seconds; once they are connected, --half H connections that finish the
 *                 handshake and then send 14 of the 28 bytes of a request header, and --silent S
 *                 connections that connect and send nothing at all. For the half and silent ones it reports
 *                 when the server dropped them (EOF or reset), counted from the moment they connected.
 * At the end every socket is closed (an NBD_CMD_DISC first where a connection is in transmission), then a
 * JSON summary goes to stdout; progress goes to stderr.
 *
 * Other options: --host 127.0.0.1 --port P --export NAME --size BYTES (used when the server sends no
 * NBD_INFO_EXPORT) --handshake-timeout S (a handshake not finished by then counts as failed, default 30)
 * --grace S (how long to wait for the replies still outstanding at the end, default 5) --seed N.
 */

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.SplittableRandom;
import java.util.TreeMap;

public class ConnLoad {
    static final long NBDMAGIC = 0x4E42444D41474943L;
    static final long IHAVEOPT = 0x49484156454F5054L;
    static final long OPT_REPLY_MAGIC = 0x3e889045565a9L;
    static final int REQUEST_MAGIC = 0x25609513;
    static final int SIMPLE_REPLY_MAGIC = 0x67446698;
    static final int OPT_GO = 7;
    static final int REP_ACK = 1, REP_INFO = 3, INFO_EXPORT = 0;
    static final int CMD_READ = 0, CMD_DISC = 2;
    static final int FLAG_FIXED_NEWSTYLE = 1, FLAG_NO_ZEROES = 2;
    static final int BLOCK = 4096;
    static final int MAX_OPTION_REPLY = 1 << 20;

    enum Kind { LOAD, READER, HALF, SILENT }

    enum State { CONNECTING, GREETING, OPT_HEADER, OPT_DATA, READY, REPLY_HEADER, REPLY_DATA, WAIT_EOF, CLOSED }

    static final class Conn {
        final Kind kind;
        SocketChannel ch;
        SelectionKey key;
        State state = State.CONNECTING;
        final ByteBuffer hdr = ByteBuffer.allocate(20);
        ByteBuffer optData;
        int optType;
        int skip;
        ByteBuffer out;
        long tStart, tConnected, tReady, tSent, tEnd;
        long nextSend;
        long cookie;
        boolean resolved;      // handshake finished (ok or failed): no longer counts against the window
        boolean sendPending;   // a scheduled read is waiting for the previous reply
        boolean gotGreeting;
        long exportSize = -1;

        Conn(Kind kind) {
            this.kind = kind;
        }
    }

    /** A growable list of latencies in microseconds. */
    static final class Samples {
        int[] v = new int[1024];
        int n;

        void add(long micros) {
            if (n == v.length) v = Arrays.copyOf(v, n * 2);
            v[n++] = (int) Math.min(Integer.MAX_VALUE, Math.max(0, micros));
        }

        int[] sorted() {
            int[] s = Arrays.copyOf(v, n);
            Arrays.sort(s);
            return s;
        }

        static Double pct(int[] sorted, double p) {
            if (sorted.length == 0) return null;
            int i = (int) Math.min(sorted.length - 1, Math.floor(sorted.length * p / 100.0));
            return sorted[i] / 1000.0;
        }
    }

    /** Outcome counters of one kind of connection. */
    static final class Group {
        final Kind kind;
        int target, started, ok, failed;
        final Map<String, Integer> failures = new TreeMap<>();
        final Samples handshake = new Samples();
        final Samples reads = new Samples();
        final Samples dropped = new Samples(); // µs from connecting to the server's EOF/reset
        /** Per second of the load: reads answered, the slowest (µs), and those over 5 ms; shows when a tail happens. */
        final Map<Integer, long[]> bySecond = new TreeMap<>();
        long readsSent, readsOk, wrongReply, errorReply, closedByServer, closedInFlight, late, unanswered, refused;
        int greeted;

        Group(Kind kind) {
            this.kind = kind;
        }

        void fail(String why) {
            failed++;
            failures.merge(why, 1, Integer::sum);
        }
    }

    // ------------------------------------------------------------------ settings

    String host = "127.0.0.1";
    int port;
    String mode = "many";
    String export = "";
    long fallbackSize = 1L << 30;
    int conns = 1000, batch = 500, readers = 16, half = 200, silent = 2000;
    double duration = 60, handshakeTimeout = 30, grace = 5;
    long intervalNanos = 1_000_000_000L;
    long seed = 42;

    // ------------------------------------------------------------------ state

    Selector selector;
    InetSocketAddress addr;
    SplittableRandom rng;
    final ByteBuffer scratch = ByteBuffer.allocateDirect(256 << 10);
    final List<Conn> all = new ArrayList<>();
    final ArrayDeque<Conn> handshaking = new ArrayDeque<>();
    final PriorityQueue<Conn> timers = new PriorityQueue<>((a, b) -> Long.compare(a.nextSend, b.nextSend));
    final Map<Kind, Group> groups = new LinkedHashMap<>();
    int inWindow;
    boolean clientFdExhausted;
    String clientError;
    boolean sending;          // new reads may be sent
    long loadStart, loadEnd;  // nanoTime
    long t0 = System.nanoTime();
    long lastProgress;
    Double cpuAtLoad;

    public static void main(String[] args) throws Exception {
        ConnLoad l = new ConnLoad();
        l.parse(args);
        l.run();
    }

    void parse(String[] args) {
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String v = i + 1 < args.length ? args[i + 1] : null;
            if (a.contains("=")) {
                v = a.substring(a.indexOf('=') + 1);
                a = a.substring(0, a.indexOf('='));
            } else {
                i++;
            }
            if (v == null) throw new IllegalArgumentException("missing value for " + a);
            switch (a) {
                case "--host" -> host = v;
                case "--port" -> port = Integer.parseInt(v);
                case "--mode" -> mode = v;
                case "--export" -> export = v;
                case "--size" -> fallbackSize = Long.parseLong(v);
                case "--conns" -> conns = Integer.parseInt(v);
                case "--batch" -> batch = Math.max(1, Integer.parseInt(v));
                case "--readers" -> readers = Integer.parseInt(v);
                case "--half" -> half = Integer.parseInt(v);
                case "--silent" -> silent = Integer.parseInt(v);
                case "--duration" -> duration = Double.parseDouble(v);
                case "--interval-ms" -> intervalNanos = (long) (Double.parseDouble(v) * 1e6);
                case "--handshake-timeout" -> handshakeTimeout = Double.parseDouble(v);
                case "--grace" -> grace = Double.parseDouble(v);
                case "--seed" -> seed = Long.parseLong(v);
                default -> throw new IllegalArgumentException("unknown option " + a);
            }
        }
        if (port <= 0) throw new IllegalArgumentException("--port is required");
        if (!mode.equals("many") && !mode.equals("idle")) throw new IllegalArgumentException("--mode many|idle");
    }

    static void log(String s) {
        System.err.println("ConnLoad: " + s);
        System.err.flush();
    }

    double secs(long nanos) {
        return (nanos - t0) / 1e9;
    }

    // ------------------------------------------------------------------ the run

    void run() throws IOException {
        selector = Selector.open();
        addr = new InetSocketAddress(host, port);
        rng = new SplittableRandom(seed);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("mode", mode);
        if (mode.equals("many")) {
            Group g = group(Kind.LOAD, conns);
            long hs0 = System.nanoTime();
            connectAll(List.of(g), () -> false);
            long hs1 = System.nanoTime();
            log(String.format(Locale.ROOT, "handshakes: %d ok, %d failed in %.1f s", g.ok, g.failed, (hs1 - hs0) / 1e9));
            out.put("handshake_phase_s", (hs1 - hs0) / 1e9);
            loadStart = System.nanoTime();
            loadEnd = loadStart + (long) (duration * 1e9);
            cpuAtLoad = selfCpuSeconds();
            sending = true;
            for (Conn c : all) {
                if (c.state == State.READY) {
                    c.nextSend = loadStart + (long) (rng.nextDouble() * intervalNanos);
                    timers.add(c);
                }
            }
            loop(() -> System.nanoTime() >= loadEnd);
        } else {
            Group r = group(Kind.READER, readers);
            Group h = group(Kind.HALF, half);
            Group s = group(Kind.SILENT, silent);
            connectAll(List.of(r), () -> false);
            loadStart = System.nanoTime();
            loadEnd = loadStart + (long) (duration * 1e9);
            cpuAtLoad = selfCpuSeconds();
            sending = true;
            for (Conn c : all) if (c.state == State.READY) sendRead(c, loadStart);
            log(String.format(Locale.ROOT, "readers: %d ok, %d failed; opening %d half-header and %d silent connections",
                r.ok, r.failed, half, silent));
            long c0 = System.nanoTime();
            connectAll(List.of(h, s), () -> System.nanoTime() >= loadEnd);
            long c1 = System.nanoTime();
            out.put("idle_connect_phase_s", (c1 - c0) / 1e9);
            log(String.format(Locale.ROOT, "half-header: %d ok, %d failed; silent: %d connected, %d failed, in %.1f s",
                h.ok, h.failed, s.ok, s.failed, (c1 - c0) / 1e9));
            loop(() -> System.nanoTime() >= loadEnd);
        }
        long end = System.nanoTime();
        out.put("load_s", (end - loadStart) / 1e9);
        Double cpuEnd = selfCpuSeconds();
        out.put("gen_load_cpu_s", cpuEnd != null && cpuAtLoad != null ? cpuEnd - cpuAtLoad : null);
        // stop sending; wait for the replies still outstanding
        sending = false;
        timers.clear();
        long graceEnd = end + (long) (grace * 1e9);
        loop(() -> System.nanoTime() >= graceEnd || inFlight() == 0);
        for (Conn c : all) {
            if (c.state == State.REPLY_HEADER || c.state == State.REPLY_DATA) groups.get(c.kind).unanswered++;
        }
        // the half and silent connections still open now were not dropped
        long now = System.nanoTime();
        Map<String, Object> stillOpen = new LinkedHashMap<>();
        for (Group g : groups.values()) {
            if (g.kind != Kind.HALF && g.kind != Kind.SILENT) continue;
            int open = 0, mute = 0;
            long youngest = Long.MAX_VALUE, oldest = 0;
            for (Conn c : all) {
                if (c.kind == g.kind && c.state == State.WAIT_EOF) {
                    open++;
                    if (!c.gotGreeting) mute++;
                    youngest = Math.min(youngest, now - c.tConnected);
                    oldest = Math.max(oldest, now - c.tConnected);
                }
            }
            stillOpen.put(g.kind.name(), open);
            stillOpen.put(g.kind.name() + "_no_greeting", mute);
            stillOpen.put(g.kind.name() + "_min_age_s", open > 0 ? youngest / 1e9 : null);
            stillOpen.put(g.kind.name() + "_max_age_s", open > 0 ? oldest / 1e9 : null);
        }
        closeAll();
        long closedAtMillis = System.currentTimeMillis();
        log("all connections closed");
        out.put("closed_at_unix", closedAtMillis / 1000.0);
        out.put("export_size", exportSize());
        for (Group g : groups.values()) out.put(g.kind.name().toLowerCase(Locale.ROOT), summary(g, stillOpen));
        out.put("client_fd_exhausted", clientFdExhausted);
        out.put("client_error", clientError);
        out.put("gen_cpu_s", selfCpuSeconds());
        out.put("gen_peak_rss_mib", selfPeakRssMiB());
        out.put("gen_threads", Thread.getAllStackTraces().size());
        System.out.println(toJson(out));
        System.out.flush();
    }

    Group group(Kind k, int target) {
        Group g = new Group(k);
        g.target = target;
        groups.put(k, g);
        return g;
    }

    long exportSize() {
        for (Conn c : all) if (c.exportSize > 0) return c.exportSize;
        return -1;
    }

    int inFlight() {
        int n = 0;
        for (Conn c : all) if (c.state == State.REPLY_HEADER || c.state == State.REPLY_DATA) n++;
        return n;
    }

    interface Stop {
        boolean now();
    }

    /** Opens the groups' connections in order, at most `batch` handshakes at a time, until all are resolved. */
    void connectAll(List<Group> gs, Stop stop) {
        for (Group g : gs) {
            while (g.started < g.target && !clientFdExhausted) {
                while (inWindow < batch && g.started < g.target && !clientFdExhausted) open(g);
                if (stop.now()) return;
                step();
            }
        }
        while (inWindow > 0 && !stop.now()) step();
    }

    void loop(Stop stop) {
        while (!stop.now()) step();
    }

    /** One round: due timers, handshake timeouts, then the ready channels. */
    void step() {
        long now = System.nanoTime();
        // timers due within the next half millisecond fire now: the selector sleeps in whole milliseconds, and
        // polling it until the exact nanosecond would spin this thread at 100% of a core
        while (!timers.isEmpty() && timers.peek().nextSend <= now + 500_000) {
            Conn c = timers.poll();
            if (c.state == State.CLOSED || !sending) continue;
            if (c.state == State.READY) sendRead(c, now);
            else c.sendPending = true;
            c.nextSend += intervalNanos;
            if (c.nextSend < loadEnd) timers.add(c);
        }
        long hsLimit = (long) (handshakeTimeout * 1e9);
        while (!handshaking.isEmpty()) {
            Conn c = handshaking.peek();
            if (c.resolved) {
                handshaking.poll();
            } else if (now - c.tStart > hsLimit) {
                handshaking.poll();
                String where = switch (c.state) {
                    case CONNECTING -> "connecting";
                    case GREETING -> "waiting for the greeting";
                    default -> "waiting for the GO reply";
                };
                failHandshake(c, "timeout (" + (long) handshakeTimeout + " s) " + where);
            } else {
                break;
            }
        }
        if (now - lastProgress > 5_000_000_000L) {
            lastProgress = now;
            progress();
        }
        long waitMs = 100;
        if (!timers.isEmpty()) waitMs = Math.max(1, (timers.peek().nextSend - now + 999_999) / 1_000_000);
        try {
            selector.select(this::ready, Math.min(waitMs, 100));
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    void progress() {
        StringBuilder sb = new StringBuilder(String.format(Locale.ROOT, "t=%.0fs", secs(System.nanoTime())));
        for (Group g : groups.values()) {
            sb.append(String.format(Locale.ROOT, " %s: %d/%d ok %d failed", g.kind.name().toLowerCase(Locale.ROOT),
                g.ok, g.target, g.failed));
            if (g.kind == Kind.LOAD || g.kind == Kind.READER) {
                sb.append(String.format(Locale.ROOT, " reads %d errors %d", g.readsOk,
                    g.wrongReply + g.errorReply + g.closedByServer));
            } else {
                sb.append(" dropped ").append(g.dropped.n);
            }
            sb.append(';');
        }
        log(sb.toString());
    }

    // ------------------------------------------------------------------ connections

    void open(Group g) {
        Conn c = new Conn(g.kind);
        c.tStart = System.nanoTime();
        g.started++;
        try {
            c.ch = SocketChannel.open();
        } catch (IOException e) {
            // EMFILE: this process ran out of descriptors; no use trying more
            clientFdExhausted = true;
            clientError = String.valueOf(e.getMessage());
            g.fail("client: " + e.getMessage());
            log("cannot open a socket: " + e.getMessage() + " (stopping at " + (g.started - 1) + ")");
            return;
        }
        all.add(c);
        inWindow++;
        handshaking.add(c);
        try {
            c.ch.configureBlocking(false);
            c.ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            c.key = c.ch.register(selector, 0, c);
            if (c.ch.connect(addr)) connected(c);
            else c.key.interestOps(SelectionKey.OP_CONNECT);
        } catch (IOException e) {
            failHandshake(c, reason(e, "connect"));
        }
    }

    void ready(SelectionKey key) {
        Conn c = (Conn) key.attachment();
        try {
            if (!key.isValid()) return;
            if (key.isConnectable()) {
                if (c.ch.finishConnect()) connected(c);
                else return;
            }
            if (key.isValid() && key.isWritable()) flush(c);
            if (key.isValid() && key.isReadable()) readable(c);
        } catch (IOException e) {
            lost(c, e);
        }
    }

    void connected(Conn c) {
        c.tConnected = System.nanoTime();
        c.state = State.GREETING;
        c.hdr.clear().limit(18);
        c.key.interestOps(SelectionKey.OP_READ);
        if (c.kind == Kind.SILENT) {
            // it sends nothing; the server's greeting is read (and thrown away) only to see when it closes
            Group g = groups.get(c.kind);
            c.resolved = true;
            inWindow--;
            g.ok++;
            g.handshake.add((c.tConnected - c.tStart) / 1000);
            c.state = State.WAIT_EOF;
        }
    }

    /** An I/O error or an EOF: what it means depends on where the connection was. */
    void lost(Conn c, IOException e) {
        serverClosed(c, reason(e, "reset"));
    }

    static String reason(IOException e, String fallback) {
        String m = e.getMessage();
        if (m == null) return fallback;
        if (m.contains("refused")) return "connection refused";
        if (m.contains("reset")) return "reset by server";
        if (m.contains("Broken pipe")) return "broken pipe";
        return m.length() > 60 ? m.substring(0, 60) : m;
    }

    void serverClosed(Conn c, String why) {
        Group g = groups.get(c.kind);
        long now = System.nanoTime();
        switch (c.state) {
            case CONNECTING, GREETING, OPT_HEADER, OPT_DATA -> failHandshake(c,
                (c.state == State.CONNECTING ? "" : c.state == State.GREETING ? "before the greeting: " : "during options: ") + why);
            case READY -> {
                g.closedByServer++;
                close(c, now);
            }
            case REPLY_HEADER, REPLY_DATA -> {
                g.closedByServer++;
                g.closedInFlight++;
                close(c, now);
            }
            case WAIT_EOF -> {
                if (c.kind == Kind.SILENT && !c.gotGreeting) {
                    // closed without a word: the server refused it at accept, it did not time it out
                    g.refused++;
                } else {
                    g.dropped.add((now - c.tConnected) / 1000);
                }
                close(c, now);
            }
            case CLOSED -> { }
        }
    }

    void failHandshake(Conn c, String why) {
        Group g = groups.get(c.kind);
        if (!c.resolved) {
            c.resolved = true;
            inWindow--;
            g.fail(why);
        }
        close(c, System.nanoTime());
    }

    void close(Conn c, long now) {
        c.state = State.CLOSED;
        c.tEnd = now;
        try {
            if (c.key != null) c.key.cancel();
            if (c.ch != null) c.ch.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }

    void handshakeDone(Conn c) {
        Group g = groups.get(c.kind);
        long now = System.nanoTime();
        c.tReady = now;
        c.resolved = true;
        inWindow--;
        g.ok++;
        g.handshake.add((now - c.tStart) / 1000);
        c.state = State.READY;
        if (c.kind == Kind.HALF) {
            // 14 of the 28 bytes of a READ request header, then nothing
            ByteBuffer b = ByteBuffer.allocate(14);
            b.putInt(REQUEST_MAGIC).putShort((short) 0).putShort((short) CMD_READ).putInt(0).putShort((short) 1);
            b.flip();
            c.state = State.WAIT_EOF;
            send(c, b);
        } else if (c.kind == Kind.READER && sending) {
            sendRead(c, now);
        }
    }

    void send(Conn c, ByteBuffer b) {
        c.out = b;
        try {
            flush(c);
        } catch (IOException e) {
            lost(c, e);
        }
    }

    void flush(Conn c) throws IOException {
        if (c.out == null || c.state == State.CLOSED) return;
        c.ch.write(c.out);
        if (c.out.hasRemaining()) {
            c.key.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
        } else {
            c.out = null;
            c.key.interestOps(SelectionKey.OP_READ);
        }
    }

    void sendRead(Conn c, long now) {
        Group g = groups.get(c.kind);
        long size = c.exportSize > 0 ? c.exportSize : fallbackSize;
        long blocks = Math.max(1, size / BLOCK);
        long offset = rng.nextLong(blocks) * BLOCK;
        c.cookie++;
        ByteBuffer b = ByteBuffer.allocate(28);
        b.putInt(REQUEST_MAGIC).putShort((short) 0).putShort((short) CMD_READ).putLong(c.cookie).putLong(offset).putInt(BLOCK);
        b.flip();
        c.state = State.REPLY_HEADER;
        c.hdr.clear().limit(16);
        c.tSent = now;
        c.sendPending = false;
        g.readsSent++;
        send(c, b);
    }

    void readDone(Conn c, boolean ok) {
        Group g = groups.get(c.kind);
        long now = System.nanoTime();
        if (ok) {
            g.readsOk++;
            long micros = (now - c.tSent) / 1000;
            g.reads.add(micros);
            long[] sec = g.bySecond.computeIfAbsent((int) ((c.tSent - loadStart) / 1_000_000_000L), k -> new long[3]);
            sec[0]++;
            sec[1] = Math.max(sec[1], micros);
            if (micros > 5000) sec[2]++;
        }
        c.state = State.READY;
        if (!sending) return;
        if (c.kind == Kind.READER) {
            if (now < loadEnd) sendRead(c, now);
        } else if (c.sendPending) {
            g.late++;
            sendRead(c, now);
        }
    }

    /** Reads all that is there, advancing the connection's state machine. */
    void readable(Conn c) throws IOException {
        while (c.state != State.CLOSED) {
            int n;
            switch (c.state) {
                case GREETING -> {
                    n = c.ch.read(c.hdr);
                    if (n < 0) {
                        serverClosed(c, "closed by the server");
                        return;
                    }
                    if (c.hdr.hasRemaining()) return;
                    c.hdr.flip();
                    long magic = c.hdr.getLong(), opt = c.hdr.getLong();
                    int flags = c.hdr.getShort() & 0xffff;
                    if (magic != NBDMAGIC || opt != IHAVEOPT) {
                        failHandshake(c, "not a newstyle greeting");
                        return;
                    }
                    if ((flags & FLAG_FIXED_NEWSTYLE) == 0) {
                        failHandshake(c, "server is not fixed newstyle");
                        return;
                    }
                    c.gotGreeting = true;
                    groups.get(c.kind).greeted++;
                    byte[] name = export.getBytes(StandardCharsets.UTF_8);
                    ByteBuffer b = ByteBuffer.allocate(4 + 16 + 4 + name.length + 2);
                    b.putInt(FLAG_FIXED_NEWSTYLE | (flags & FLAG_NO_ZEROES));
                    b.putLong(IHAVEOPT).putInt(OPT_GO).putInt(4 + name.length + 2);
                    b.putInt(name.length).put(name).putShort((short) 0);
                    b.flip();
                    c.state = State.OPT_HEADER;
                    c.hdr.clear().limit(20);
                    send(c, b);
                }
                case OPT_HEADER -> {
                    n = c.ch.read(c.hdr);
                    if (n < 0) {
                        serverClosed(c, "closed");
                        return;
                    }
                    if (c.hdr.hasRemaining()) return;
                    c.hdr.flip();
                    long magic = c.hdr.getLong();
                    c.hdr.getInt(); // the option replied to
                    c.optType = c.hdr.getInt();
                    int len = c.hdr.getInt();
                    if (magic != OPT_REPLY_MAGIC || len < 0 || len > MAX_OPTION_REPLY) {
                        failHandshake(c, "bad option reply");
                        return;
                    }
                    c.optData = ByteBuffer.allocate(len);
                    c.state = State.OPT_DATA;
                    if (len == 0 && optReply(c)) return;
                }
                case OPT_DATA -> {
                    n = c.ch.read(c.optData);
                    if (n < 0) {
                        serverClosed(c, "closed");
                        return;
                    }
                    if (c.optData.hasRemaining()) return;
                    if (optReply(c)) return;
                }
                case READY -> {
                    // nothing is expected between requests: an EOF, or a reply nobody asked for
                    scratch.clear();
                    n = c.ch.read(scratch);
                    if (n < 0) {
                        serverClosed(c, "closed");
                        return;
                    }
                    if (n == 0) return;
                    groups.get(c.kind).wrongReply++;
                    close(c, System.nanoTime());
                    return;
                }
                case REPLY_HEADER -> {
                    n = c.ch.read(c.hdr);
                    if (n < 0) {
                        serverClosed(c, "closed");
                        return;
                    }
                    if (c.hdr.hasRemaining()) return;
                    c.hdr.flip();
                    int magic = c.hdr.getInt(), error = c.hdr.getInt();
                    long cookie = c.hdr.getLong();
                    if (magic != SIMPLE_REPLY_MAGIC || cookie != c.cookie) {
                        // the stream cannot be followed any further
                        groups.get(c.kind).wrongReply++;
                        close(c, System.nanoTime());
                        return;
                    }
                    if (error != 0) {
                        groups.get(c.kind).errorReply++;
                        readDone(c, false);
                    } else {
                        c.skip = BLOCK;
                        c.state = State.REPLY_DATA;
                    }
                }
                case REPLY_DATA -> {
                    scratch.clear().limit(Math.min(c.skip, scratch.capacity()));
                    n = c.ch.read(scratch);
                    if (n < 0) {
                        serverClosed(c, "closed");
                        return;
                    }
                    if (n == 0) return;
                    c.skip -= n;
                    if (c.skip == 0) readDone(c, true);
                }
                case WAIT_EOF -> {
                    scratch.clear();
                    n = c.ch.read(scratch);
                    if (n < 0) {
                        serverClosed(c, "closed");
                        return;
                    }
                    if (n == 0) return;
                    if (!c.gotGreeting) groups.get(c.kind).greeted++;
                    c.gotGreeting = true;
                }
                default -> {
                    return;
                }
            }
        }
    }

    /** Handles a complete option reply; true when the connection left the option phase (or was closed). */
    boolean optReply(Conn c) {
        ByteBuffer d = c.optData.flip();
        int type = c.optType;
        if (type == REP_ACK) {
            c.optData = null;
            handshakeDone(c);
            return c.state == State.CLOSED;
        }
        if ((type & 0x80000000) != 0) {
            String msg = d.remaining() > 0 ? ": " + StandardCharsets.UTF_8.decode(d.slice()) : "";
            String[] names = {"", "UNSUP", "POLICY", "INVALID", "PLATFORM", "TLS_REQD", "UNKNOWN", "SHUTDOWN",
                "BLOCK_SIZE_REQD", "TOO_BIG", "EXT_HEADER_REQD"};
            int code = type & 0x7fffffff;
            String name = code > 0 && code < names.length ? "NBD_REP_ERR_" + names[code] : String.format("%#x", type);
            failHandshake(c, "GO refused, " + name + (msg.length() > 50 ? msg.substring(0, 50) : msg));
            return true;
        }
        if (type == REP_INFO && d.remaining() >= 12 && (d.getShort(0) & 0xffff) == INFO_EXPORT) {
            c.exportSize = d.getLong(2);
        }
        c.optData = null;
        c.state = State.OPT_HEADER;
        c.hdr.clear().limit(20);
        return false;
    }

    void closeAll() {
        ByteBuffer disc = ByteBuffer.allocate(28);
        disc.putInt(REQUEST_MAGIC).putShort((short) 0).putShort((short) CMD_DISC).putLong(0).putLong(0).putInt(0);
        long now = System.nanoTime();
        for (Conn c : all) {
            if (c.state == State.CLOSED) continue;
            if (c.state == State.READY && c.out == null) {
                try {
                    c.ch.write(disc.clear());
                } catch (IOException ignored) {
                    // closing anyway
                }
            }
            close(c, now);
        }
        try {
            selector.selectNow();
            selector.close();
        } catch (IOException ignored) {
            // done
        }
    }

    // ------------------------------------------------------------------ summary

    Map<String, Object> summary(Group g, Map<String, Object> stillOpen) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("target", g.target);
        m.put("started", g.started);
        m.put("handshake_ok", g.ok);
        m.put("handshake_failed", g.failed);
        m.put("handshake_failures", g.failures);
        int[] hs = g.handshake.sorted();
        m.put("handshake_p50_ms", Samples.pct(hs, 50));
        m.put("handshake_p99_ms", Samples.pct(hs, 99));
        m.put("handshake_max_ms", hs.length > 0 ? hs[hs.length - 1] / 1000.0 : null);
        if (g.kind == Kind.LOAD || g.kind == Kind.READER) {
            int[] r = g.reads.sorted();
            m.put("reads_sent", g.readsSent);
            m.put("reads_ok", g.readsOk);
            m.put("wrong_reply", g.wrongReply);
            m.put("error_reply", g.errorReply);
            m.put("closed_by_server", g.closedByServer);
            m.put("closed_in_flight", g.closedInFlight);
            m.put("unanswered", g.unanswered);
            m.put("late_sends", g.late);
            m.put("read_p50_ms", Samples.pct(r, 50));
            m.put("read_p99_ms", Samples.pct(r, 99));
            m.put("read_p999_ms", Samples.pct(r, 99.9));
            m.put("read_max_ms", r.length > 0 ? r[r.length - 1] / 1000.0 : null);
            double secs = (loadEnd - loadStart) / 1e9;
            m.put("reads_per_s", secs > 0 ? g.readsOk / secs : null);
            List<List<Long>> timeline = new ArrayList<>();
            g.bySecond.forEach((sec, v) -> timeline.add(List.of((long) sec, v[0], v[1], v[2])));
            m.put("read_by_second", timeline); // [second, reads, max µs, reads over 5 ms]
        } else {
            int[] d = g.dropped.sorted();
            m.put("dropped", d.length);
            m.put("greeted", g.greeted);
            m.put("refused", g.refused);
            m.put("drop_min_s", d.length > 0 ? d[0] / 1e6 : null);
            m.put("drop_p50_s", d.length > 0 ? Samples.pct(d, 50) / 1000.0 : null);
            m.put("drop_max_s", d.length > 0 ? d[d.length - 1] / 1e6 : null);
            m.put("open_at_end", stillOpen.get(g.kind.name()));
            m.put("open_min_age_s", stillOpen.get(g.kind.name() + "_min_age_s"));
            m.put("open_max_age_s", stillOpen.get(g.kind.name() + "_max_age_s"));
            m.put("open_without_greeting", stillOpen.get(g.kind.name() + "_no_greeting"));
        }
        return m;
    }

    static Double selfCpuSeconds() {
        try {
            String s = Files.readString(Path.of("/proc/self/stat"));
            String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
            return (Long.parseLong(f[11]) + Long.parseLong(f[12])) / 100.0;  // USER_HZ is 100 on Linux
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    static Double selfPeakRssMiB() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) return Long.parseLong(line.split("\\s+")[1]) / 1024.0;
            }
        } catch (IOException | RuntimeException e) {
            // not Linux
        }
        return null;
    }

    static String toJson(Object o) {
        if (o == null) return "null";
        if (o instanceof String s) {
            StringBuilder sb = new StringBuilder("\"");
            for (char ch : s.toCharArray()) {
                switch (ch) {
                    case '"' -> sb.append("\\\"");
                    case '\\' -> sb.append("\\\\");
                    case '\n' -> sb.append("\\n");
                    default -> {
                        if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
                        else sb.append(ch);
                    }
                }
            }
            return sb.append('"').toString();
        }
        if (o instanceof Double d) return d.isNaN() || d.isInfinite() ? "null" : String.format(Locale.ROOT, "%.6f", d);
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof Map<?, ?> m) {
            StringBuilder sb = new StringBuilder("{");
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (sb.length() > 1) sb.append(", ");
                sb.append(toJson(String.valueOf(e.getKey()))).append(": ").append(toJson(e.getValue()));
            }
            return sb.append('}').toString();
        }
        return toJson(String.valueOf(o));
    }
}
