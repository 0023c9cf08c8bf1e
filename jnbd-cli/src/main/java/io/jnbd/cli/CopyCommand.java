package io.jnbd.cli;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;

import java.time.Duration;

import picocli.CommandLine.Model.CommandSpec;

/**
 * {@code jnbd copy SRC DST}: a sparse-aware, pipelined copy between NBD exports and local files. Its model is built
 * in code ({@link #model}, see {@link Models}): an incremental copy takes well under a second, and reading this
 * command's annotations took a seventh of it.
 */
public final class CopyCommand implements java.util.concurrent.Callable<Integer> {

    private static final String[] DESCRIPTION = {
        "Copy a disk between NBD exports and local files, skipping what reads as zeroes.",
        "",
        "SRC and DST are each an NBD URI or a local file:",
        "  nbd://host[:port]/export   nbd+unix:///export?socket=PATH",
        "  nbds://host[:port]/export?tls-certificates=DIR  (TLS; also tls-psk-file=FILE,",
        "  tls-verify-peer=false, tls-hostname=NAME, user@host for the PSK identity)",
        "",
        "The copy is sparse-aware. Ranges the source reports as zero (NBD block",
        "status) are not read: an NBD destination gets WRITE_ZEROES for them, a",
        "local file (created or truncated first) keeps them as holes. Data that",
        "turns out to be all zeroes is treated the same way (between two servers,",
        "data whose first 4 KiB are zeroes is read and looked at whole; the rest",
        "passes from socket to socket in the kernel). Many requests stay in",
        "flight: --requests per connection, --connections when the server allows",
        "multi-conn. A progress bar with the rate and the time left is drawn on",
        "stderr when stderr is a terminal.",
        "",
        "With --bitmap NAME only what changed is copied: the ranges that SRC's",
        "dirty bitmap NAME reports dirty (its metadata context",
        "qemu:dirty-bitmap:NAME, as qemu-nbd -B NAME exports it), onto an",
        "existing DST of the same size, such as an earlier full copy; DST is",
        "neither created nor truncated. A dirty range that now reads as zeroes is",
        "zeroed on DST, never skipped. The progress bar counts dirty bytes, and a",
        "line on stdout gives the dirty bytes copied against the disk's size. A",
        "NAME that SRC does not offer fails with the names it does offer.",
        "",
        "Exit status: 0 when every byte was copied; 1 on failure, with one line",
        "naming what failed and how far the copy got; 2 on a usage error (bad",
        "options, unusable TLS files); 130 or 143 when stopped by SIGINT (Ctrl-C)",
        "or SIGTERM, with one line saying how far the copy got. After a failure or",
        "a stop, the line names the prefix of the destination that is complete.",
        "",
        "With --reconnect-delay a server's restart is ridden out (see docs/client.md,",
        "\"Reconnect\"); the data then passes through this process (no splice): a",
        "payload spliced from one socket into another could not be sent again.",
        ""};

    private static final String[] FOOTER = {"", "Examples:",
        "  # download an export into a sparse local file",
        "  jnbd copy nbd://server/disk disk.img",
        "  # upload a local file to an export",
        "  jnbd copy disk.img nbd://server/disk",
        "  # between two servers, 4 connections each (if they allow multi-conn)",
        "  jnbd copy --connections 4 nbd://a/x nbd://b/y",
        "  jnbd copy 'nbd+unix:///?socket=/run/nbd.sock' out.raw",
        "  # over TLS, the server's certificate checked against DIR/ca-cert.pem",
        "  jnbd copy 'nbds://server/disk?tls-certificates=/etc/pki/jnbd' disk.img",
        "  # ride out a restart of the server of up to 30 s",
        "  jnbd copy --reconnect-delay 30 disk.img nbd://server/disk",
        "  # incremental backup: backup.raw is a full copy of disk.qcow2 made when",
        "  # its bitmap b0 was added (qemu-img bitmap --add disk.qcow2 b0)",
        "  qemu-nbd -r -t -f qcow2 -B b0 -p 10810 disk.qcow2 &",
        "  jnbd copy --bitmap b0 nbd://127.0.0.1:10810/ backup.raw"};

    String source;
    String destination;
    int connections;
    int requests;
    int requestSize;
    int timeoutSeconds;
    ReconnectOption reconnect = new ReconnectOption();
    boolean splice;
    Boolean progress;
    String bitmap;

    /** This command's picocli model, bound to this object's fields. */
    CommandSpec model() {
        CommandSpec s = Models.command(this, "copy", DESCRIPTION, FOOTER);
        s.addPositional(Models.positional("0", () -> source, v -> source = v)
            .paramLabel("SRC").description("source: NBD URI or local file").build());
        s.addPositional(Models.positional("1", () -> destination, v -> destination = v)
            .paramLabel("DST").description("destination: NBD URI or local file (created or truncated; with --bitmap: existing, kept)").build());
        s.addOption(Models.option("--connections", int.class, () -> connections, v -> connections = v)
            .paramLabel("N").defaultValue("4")
            .description("connections per NBD export, used when the server offers multi-conn (default: ${DEFAULT-VALUE})").build());
        s.addOption(Models.option("--requests", int.class, () -> requests, v -> requests = v)
            .paramLabel("N").defaultValue("32")
            .description("requests in flight per connection (default: ${DEFAULT-VALUE})").build());
        s.addOption(Models.option("--request-size", int.class, () -> requestSize, v -> requestSize = v)
            .paramLabel("BYTES").defaultValue("1048576")
            .description("bytes per read/write request (default: ${DEFAULT-VALUE})").build());
        s.addOption(Models.option("--timeout", int.class, () -> timeoutSeconds, v -> timeoutSeconds = v)
            .paramLabel("SECONDS").defaultValue("60")
            .description("fail a request that gets no reply within this time (default: ${DEFAULT-VALUE})").build());
        s.addOption(reconnect.option());
        s.addOption(Models.option("--splice", boolean.class, () -> splice, v -> splice = v)
            .negatable(true).defaultValue("true").fallbackValue("true")
            .description("between two NBD servers over plain connections, pass the data from socket to socket inside "
                + "the kernel (splice) instead of through this process's memory (default: on)").build());
        s.addOption(Models.option("--progress", Boolean.class, () -> progress, v -> progress = v)
            .negatable(true)
            .description("draw a progress bar with rate and time left on stderr (default: only when stderr is a terminal)").build());
        s.addOption(Models.option("--bitmap", String.class, () -> bitmap, v -> bitmap = v)
            .paramLabel("NAME")
            .description("copy only the ranges that SRC's dirty bitmap NAME (metadata context qemu:dirty-bitmap:NAME) "
                + "reports changed, onto an existing DST of the same size: an incremental backup").build());
        spec = s;
        return s;
    }

    /**
     * From this many dirty bytes on, an incremental copy to a local file writes behind ({@link WriteBehind}). Below
     * it the page cache holds them all and the final fsync sorts the scattered writes: 645 ranges of 64 KiB onto a
     * 4 GiB file took 0.95-1.27 s that way against 1.25-1.65 s with write-behind waiting for each range.
     */
    private static final long WRITE_BEHIND_MIN = 256L << 20;

    /** The metadata context namespace of dirty bitmaps, as qemu names it. */
    static final String BITMAP_CONTEXT = "qemu:dirty-bitmap:";

    private CommandSpec spec;

    private CopyTally tally;
    private Progress bar;

    @Override
    public Integer call() throws Exception {
        if (connections < 1 || requests < 1 || requestSize < 4096) {
            throw new picocli.CommandLine.ParameterException(spec.commandLine(),
                "--connections and --requests must be at least 1, --request-size at least 4096");
        }
        ClientOptions options = ClientOptions.defaults().withConnections(connections).withRequestsInFlight(requests)
            .withRequestTimeout(Duration.ofSeconds(timeoutSeconds))
            .withReconnect(reconnect.delay(spec.commandLine()));
        if (bitmap != null) return incremental(options);
        try (Disk src = Disk.open(source, options); Disk dst = Disk.create(destination, src.size(), options)) {
            long size = src.size();
            tally = new CopyTally(size);
            return run(src, dst, size, () -> window(src, dst).copyAll(size));
        }
    }

    private interface Body {
        void run() throws Exception;
    }

    /**
     * Runs a copy's {@code body} under a progress bar of {@code total} bytes and a hook that reports a stop, flushes
     * the destination, and says what failed: 0 or 1.
     */
    private int run(Disk src, Disk dst, long total, Body body) throws Exception {
        try (Progress bar = Progress.ofBytes("copy", total, progress)) {
            this.bar = bar;
            Thread stopped = Thread.ofPlatform().unstarted(() -> stopped(src, dst));
            Runtime.getRuntime().addShutdownHook(stopped);
            try {
                body.run();
                if (tally.failure() == null) dst.flush();
            } finally {
                forget(stopped);
            }
        }
        Throwable f = tally.failure();
        if (f != null) {
            spec.commandLine().getErr().println("jnbd copy: failed at offset " + tally.failedAt() + ": " + message(f)
                + "; " + tally.howFar(src.name(), dst.name()));
            return 1;
        }
        return 0;
    }

    /**
     * {@code --bitmap}: only the ranges the source's dirty bitmap reports dirty, onto the existing destination. A
     * dirty range that now reads as zeroes is copied like any other (read, found to be zeroes, zeroed on the
     * destination): skipping it would leave the old data there. The bitmap is walked first to count the dirty bytes
     * for the progress bar; the copy then takes the ranges that walk kept, or walks the bitmap again when there were
     * too many to keep ({@link DirtyRanges#KEEP_MAX}).
     */
    private int incremental(ClientOptions options) throws Exception {
        if (bitmap.isEmpty()) throw new picocli.CommandLine.ParameterException(spec.commandLine(), "--bitmap needs a name");
        if (!NbdUri.looksLikeUri(source)) {
            throw new picocli.CommandLine.ParameterException(spec.commandLine(),
                "--bitmap needs an NBD source (a local file has no dirty bitmap): " + source);
        }
        String context = BITMAP_CONTEXT + bitmap;
        try (Disk src = Disk.open(source, options.withMetaContexts(context))) {
            NbdClient client = ((Disk.Remote) src).client();
            if (!client.metaContexts().contains(context)) {
                // First let go of the export: qemu-nbd serves one client at a time unless told otherwise.
                src.close();
                throw new java.io.IOException(noBitmap(client, options));
            }
            DirtyRanges.Status status = DirtyRanges.status(client, context);
            DirtyRanges.Total estimate = DirtyRanges.total(status, src.size(), src.blockSize());
            try (Disk dst = Disk.openExisting(destination, src.size(), options, estimate.bytes() >= WRITE_BEHIND_MIN)) {
                int align = CopyWindow.align(src, dst);
                DirtyRanges.Total dirty = align == src.blockSize() ? estimate : DirtyRanges.total(status, src.size(), align);
                tally = new CopyTally(dirty.bytes(), "dirty bytes");
                long[] ranges = new long[1];
                int exit = run(src, dst, dirty.bytes(), () -> {
                    CopyWindow window = window(src, dst);
                    ranges[0] = dirty.replay(status, src.size(), align, (offset, length) -> window.copyRange(offset, offset + length));
                    window.drain();
                });
                if (exit == 0) {
                    spec.commandLine().getOut().println("jnbd copy: copied " + tally.copied() + " dirty bytes ("
                        + ranges[0] + " ranges, bitmap " + bitmap + ") of " + src.size() + " ("
                        + Sizes.percent(tally.copied(), src.size()) + " of the disk) from " + src.name() + " to " + dst.name());
                }
                return exit;
            }
        }
    }

    /** The requests of one copy, counted in {@link #tally} and on {@link #bar} (made by {@link #run} before). */
    private CopyWindow window(Disk src, Disk dst) {
        return new CopyWindow(src, dst, requests * connections, requestSize, splice, tally, n -> bar.stepBy(n));
    }

    /** "no bitmap 'x' on SRC; it has: b0, b1", or "it has none". */
    private String noBitmap(NbdClient client, ClientOptions options) {
        String what = "no bitmap '" + bitmap + "' on " + source;
        try {
            java.util.List<String> names = NbdClient.listMetaContexts(client.uri(), options, BITMAP_CONTEXT).stream()
                .filter(c -> c.startsWith(BITMAP_CONTEXT)).map(c -> c.substring(BITMAP_CONTEXT.length())).toList();
            if (names.isEmpty() && !client.info().structuredReplies()) return what + "; it offers no metadata contexts";
            return what + "; it has" + (names.isEmpty() ? " none" : ": " + String.join(", ", names));
        } catch (java.io.IOException e) {
            return what + " (listing its bitmaps failed: " + message(e) + ")";
        }
    }

    /**
     * Runs when the JVM is stopped mid-copy (SIGINT, SIGTERM; it exits with 130 or 143): one line saying how far
     * the copy got, so that a stopped copy is never mistaken for a finished one.
     */
    private void stopped(Disk src, Disk dst) {
        bar.close(); // the line starts on a line of its own
        var err = spec.commandLine().getErr();
        err.println("jnbd copy: stopped before the end; " + tally.howFar(src.name(), dst.name())
            + ", the rest of the destination is not");
        err.flush();
    }

    private static void forget(Thread hook) {
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException shuttingDown) {
            // the hook is running or about to: the copy did not finish in time to say so
        }
    }

    static Throwable unwrap(Throwable e) {
        while ((e instanceof java.util.concurrent.CompletionException || e instanceof java.util.concurrent.ExecutionException)
               && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }

    static String message(Throwable e) {
        return e.getMessage() != null ? e.getMessage() : e.toString();
    }
}
