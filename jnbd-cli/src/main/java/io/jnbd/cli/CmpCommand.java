package io.jnbd.cli;

import io.jnbd.client.ClientOptions;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;

import picocli.CommandLine.Model.CommandSpec;

/** {@code jnbd cmp A B}: are two disks byte for byte the same? Its model is built in code. */
public final class CmpCommand implements Callable<Integer> {

    String first;
    String second;
    int requests;
    boolean quiet;

    private static final String[] DESCRIPTION = {
        "Compare two disks (NBD exports or local files) byte for byte.",
        "",
        "A and B are each an NBD URI or a local file:",
        "  nbd://host[:port]/export   nbd+unix:///export?socket=PATH",
        "  nbds://host[:port]/export?tls-certificates=DIR  (TLS; also tls-psk-file=FILE,",
        "  tls-verify-peer=false, tls-hostname=NAME, user@host for the PSK identity)",
        "",
        "Exit status: 0 when they are equal; 1 when they differ (the first",
        "differing offset, or the two sizes, are printed); 2 on error",
        "(unreachable server, unknown export, I/O error).",
        ""};

    private static final String[] FOOTER = {"", "Examples:",
        "  jnbd cmp disk.img nbd://server/disk && echo same",
        "  jnbd cmp nbd://a/x nbd://b/x",
        "  jnbd cmp disk.img 'nbds://alice@server/disk?tls-psk-file=keys.psk'"};

    /** This command's picocli model, bound to this object's fields (built in code: see {@link Models}). */
    CommandSpec model() {
        CommandSpec s = Models.command(this, "cmp", DESCRIPTION, FOOTER);
        s.exitCodeOnExecutionException(2).exitCodeOnInvalidInput(2);
        s.addPositional(Models.positional("0", () -> first, v -> first = v)
            .paramLabel("A").description("first disk: NBD URI or local file").build());
        s.addPositional(Models.positional("1", () -> second, v -> second = v)
            .paramLabel("B").description("second disk: NBD URI or local file").build());
        s.addOption(Models.option("--requests", int.class, () -> requests, v -> requests = v)
            .paramLabel("N").defaultValue("8").description("chunks read ahead from each disk (default: ${DEFAULT-VALUE})").build());
        s.addOption(Models.option("--quiet", boolean.class, () -> quiet, v -> quiet = v)
            .description("print nothing; only the exit status tells").build());
        spec = s;
        return s;
    }

    private CommandSpec spec;

    private static final int CHUNK = 1 << 20;

    @Override
    public Integer call() {
        ClientOptions options = ClientOptions.defaults().withRequestTimeout(Duration.ofSeconds(60));
        try (Disk a = Disk.open(first, options); Disk b = Disk.open(second, options)) {
            if (a.size() != b.size()) {
                say(a.name() + " " + b.name() + " differ: sizes differ, " + a.name() + " has " + a.size() + " bytes, " + b.name() + " has " + b.size());
                return 1;
            }
            long size = a.size();
            record Pair(long offset, ByteBuffer a, ByteBuffer b, CompletableFuture<Void> done) {}
            ArrayDeque<Pair> inFlight = new ArrayDeque<>();
            long next = 0;
            while (next < size || !inFlight.isEmpty()) {
                while (next < size && inFlight.size() < Math.max(1, requests)) {
                    int n = (int) Math.min(CHUNK, size - next);
                    ByteBuffer ba = ByteBuffer.allocateDirect(n);
                    ByteBuffer bb = ByteBuffer.allocateDirect(n);
                    inFlight.add(new Pair(next, ba, bb, CompletableFuture.allOf(a.read(next, ba), b.read(next, bb))));
                    next += n;
                }
                Pair p = inFlight.poll();
                p.done.join();
                // Each read advanced its buffer's position over the data.
                int at = p.a.flip().mismatch(p.b.flip());
                if (at >= 0) {
                    long offset = p.offset + at;
                    say(a.name() + " " + b.name() + " differ: first difference at offset " + offset);
                    return 1;
                }
            }
            return 0;
        } catch (Exception e) {
            spec.commandLine().getErr().println("jnbd cmp: " + CopyCommand.message(CopyCommand.unwrap(e)));
            return 2;
        }
    }

    private void say(String line) {
        if (!quiet) {
            spec.commandLine().getOut().println(line);
            spec.commandLine().getOut().flush();
        }
    }
}
