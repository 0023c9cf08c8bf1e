package io.jnbd.cli;

import io.jnbd.server.control.ControlClient;
import io.jnbd.server.control.ControlProtocol.Op;
import io.jnbd.server.control.ControlProtocol.Reply;
import io.jnbd.server.control.ControlProtocol.Request;
import io.jnbd.server.filter.dirty.DirtyBitmaps;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/** {@code jnbd bitmap list|add|clear|rotate|remove}: a running server's dirty bitmaps, through its control socket. */
@Command(name = "bitmap", mixinStandardHelpOptions = true,
    description = {
        "Change a running server's dirty bitmaps (changed-block tracking).",
        "",
        "The server must have been started with a control socket",
        "(jnbd serve --control=PATH); the commands go through it.",
        "",
        "An export tracks writes when it is served with the dirty filter",
        "(filter=dirty,dirty-bitmap=NAME). Each bitmap marks the blocks written",
        "since it was made or cleared; a backup tool reads it as the metadata",
        "context qemu:dirty-bitmap:NAME and copies only those blocks.",
        "",
        "  list    EXPORT              the bitmaps: recording or frozen,",
        "                              granularity, dirty bytes",
        "  add     EXPORT NAME         a new bitmap, all clean, recording",
        "  clear   EXPORT NAME         mark every block clean",
        "  rotate  EXPORT NAME NEXT    freeze NAME and start NEXT at one",
        "                              instant: each write lands in exactly one",
        "  remove  EXPORT NAME         delete the bitmap and its file",
        "",
        "Only the user the server runs as and root may use the socket.",
        "--control defaults to $JNBD_CONTROL; there is no other default.",
        ""},
    footer = {"", "Examples:",
        "  jnbd serve --control=/run/jnbd.ctl \\",
        "    -e 'vm0=file:/var/lib/vm0.img,filter=dirty,dirty-bitmap=b-sunday'",
        "  jnbd bitmap list --control=/run/jnbd.ctl vm0",
        "",
        "  A checkpoint: freeze what changed since Monday, record from now on",
        "  in b-tuesday, copy the frozen bitmap's blocks, then drop it:",
        "  jnbd bitmap rotate --control=/run/jnbd.ctl vm0 b-monday b-tuesday",
        "  jnbd copy --bitmap b-monday nbd://host/vm0 /backup/vm0.img",
        "  jnbd bitmap remove --control=/run/jnbd.ctl vm0 b-monday",
        "",
        "  export JNBD_CONTROL=/run/jnbd.ctl",
        "  jnbd bitmap list --json vm0 | jq '.bitmaps[].dirty_bytes'",
        "",
        "Exit status: 0 done, 1 refused or failed (one line on stderr saying why),",
        "2 a usage mistake."},
    subcommands = {BitmapCommand.ListBitmaps.class, BitmapCommand.Add.class, BitmapCommand.Clear.class,
        BitmapCommand.Rotate.class, BitmapCommand.Remove.class})
public final class BitmapCommand implements Runnable {

    @Spec
    CommandSpec spec;

    @Override
    public void run() {
        spec.commandLine().usage(spec.commandLine().getOut());
    }

    /** How long one request may take, a rotate's durable write included. */
    private static final Duration TIMEOUT = Duration.ofSeconds(60);

    /** The options every operation takes. */
    public static final class Target {
        @Option(names = "--control", paramLabel = "PATH", defaultValue = "${env:JNBD_CONTROL}",
            description = "the server's control socket (jnbd serve --control=PATH; default $JNBD_CONTROL)")
        Path control;

        @Parameters(index = "0", paramLabel = "EXPORT", description = "the export, by name")
        String export;
    }

    /** Sends one request and reports: the reply's own line on success, the error on stderr with exit 1. */
    abstract static class Operation implements Callable<Integer> {
        @Mixin
        Target target;

        @Spec
        CommandSpec spec;

        abstract Request request();

        /** What to print when the server says ok. */
        abstract String done(Reply reply);

        @Override
        public Integer call() {
            PrintWriter err = spec.commandLine().getErr();
            if (target.control == null) {
                throw new CommandLine.ParameterException(spec.commandLine(),
                    "no control socket: give --control=PATH, the path the server was started with (or set JNBD_CONTROL)");
            }
            Reply reply;
            try (ControlClient c = ControlClient.connect(target.control, TIMEOUT)) {
                reply = c.call(request());
            } catch (ControlClient.Failed e) {
                err.println("jnbd bitmap: " + e.getMessage());
                return 1;
            }
            if (!reply.succeeded()) {
                err.println("jnbd bitmap: " + reply.error());
                return 1;
            }
            PrintWriter out = spec.commandLine().getOut();
            out.print(done(reply));
            out.flush();
            return 0;
        }
    }

    @Command(name = "list", mixinStandardHelpOptions = true, description = "List an export's bitmaps.")
    public static final class ListBitmaps extends Operation {
        @Option(names = "--json", description = "print one JSON object: export, and bitmaps with name, recording, granularity, dirty_bytes")
        boolean json;

        record Listed(String export, List<Bitmap> bitmaps) {}
        record Bitmap(String name, boolean recording, long granularity, long dirtyBytes) {}

        @Override
        Request request() {
            return Request.list(target.export);
        }

        @Override
        String done(Reply reply) {
            List<DirtyBitmaps.Info> all = reply.bitmaps() == null ? List.of() : reply.bitmaps();
            if (json) {
                return Json.line(new Listed(target.export, all.stream()
                    .map(b -> new Bitmap(b.name(), b.recording(), b.granularity(), b.dirtyBytes())).toList())) + "\n";
            }
            if (all.isEmpty()) return "export '" + target.export + "' has no bitmaps\n";
            int width = Math.max(6, all.stream().mapToInt(b -> b.name().length()).max().orElse(0));
            StringBuilder b = new StringBuilder(String.format("%-" + width + "s  %-9s  %11s  %s%n", "BITMAP", "STATE", "GRANULARITY", "DIRTY"));
            for (DirtyBitmaps.Info i : all) {
                b.append(String.format("%-" + width + "s  %-9s  %11d  %d bytes%s%n", i.name(), i.recording() ? "recording" : "frozen",
                    i.granularity(), i.dirtyBytes(), i.dirtyBytes() >= 1024 ? " (" + Sizes.human(i.dirtyBytes()) + ")" : ""));
            }
            return b.toString();
        }
    }

    /** add, clear and remove: one bitmap by name. */
    abstract static class OnOne extends Operation {
        @Parameters(index = "1", paramLabel = "NAME", description = "the bitmap")
        String name;

        abstract Op op();

        @Override
        Request request() {
            return Request.of(op(), target.export, name);
        }
    }

    @Command(name = "add", mixinStandardHelpOptions = true, description = "Add a bitmap, all clean, recording from now on.")
    public static final class Add extends OnOne {
        @Override Op op() { return Op.ADD; }

        @Override
        String done(Reply reply) {
            return target.export + ": bitmap '" + name + "' added, recording\n";
        }
    }

    @Command(name = "clear", mixinStandardHelpOptions = true, description = "Mark every block of a bitmap clean.")
    public static final class Clear extends OnOne {
        @Override Op op() { return Op.CLEAR; }

        @Override
        String done(Reply reply) {
            return target.export + ": bitmap '" + name + "' cleared\n";
        }
    }

    @Command(name = "remove", mixinStandardHelpOptions = true, description = "Delete a bitmap and its file.")
    public static final class Remove extends OnOne {
        @Override Op op() { return Op.REMOVE; }

        @Override
        String done(Reply reply) {
            return target.export + ": bitmap '" + name + "' removed\n";
        }
    }

    @Command(name = "rotate", mixinStandardHelpOptions = true,
        description = {"Freeze a bitmap and start a new one, at one instant.",
            "",
            "NAME stops recording and keeps what it holds; NEXT, new and clean,",
            "records from the same instant on: every write lands in exactly one",
            "of the two. The checkpoint of an incremental backup: copy what NAME",
            "holds, then remove it."})
    public static final class Rotate extends Operation {
        @Parameters(index = "1", paramLabel = "NAME", description = "the bitmap to freeze")
        String name;

        @Parameters(index = "2", paramLabel = "NEXT", description = "the new bitmap that records from now on")
        String next;

        @Override
        Request request() {
            return Request.rotate(target.export, name, next);
        }

        @Override
        String done(Reply reply) {
            return target.export + ": bitmap '" + name + "' frozen, '" + next + "' recording\n";
        }
    }
}
