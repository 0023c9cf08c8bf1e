package io.jnbd.cli;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.filter.cow.Overlays;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.ZoneId;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/**
 * {@code jnbd overlay list DIR}, {@code discard DIR NAME}, {@code commit DIR NAME NEW-IMAGE --base BASE}: the overlays
 * of a cow filter's cow-dir.
 */
@Command(name = "overlay", mixinStandardHelpOptions = true,
    description = {"The copy-on-write overlays a cow-dir holds (filter=cow, see docs/cow.md).", ""},
    subcommands = {OverlayCommand.ListOverlays.class, OverlayCommand.Discard.class, OverlayCommand.Commit.class})
public final class OverlayCommand implements Runnable {
    @picocli.CommandLine.Spec
    picocli.CommandLine.Model.CommandSpec spec;

    @Override
    public void run() {
        spec.commandLine().usage(spec.commandLine().getOut());
    }

    @Command(name = "list", mixinStandardHelpOptions = true,
        description = {"List the overlays of DIR: name, bytes of data, blocks held (data or zeroed), last write.", ""})
    static final class ListOverlays implements Callable<Integer> {
        @Parameters(index = "0", paramLabel = "DIR", description = "the cow-dir")
        Path dir;

        @picocli.CommandLine.Spec
        picocli.CommandLine.Model.CommandSpec spec;

        private static final DateTimeFormatter WHEN = DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss").withZone(ZoneId.systemDefault());

        @Override
        public Integer call() throws Exception {
            List<Overlays.Info> all = Overlays.list(dir);
            var out = spec.commandLine().getOut();
            out.printf("%-24s %14s %10s %10s  %s%n", "NAME", "DATA BYTES", "BLOCKS", "ZEROED", "LAST WRITE");
            for (Overlays.Info i : all) {
                String name = i.shared() ? "(shared)" : i.name();
                if (i.problem() != null) out.printf("%-24s %s%n", name, "damaged: " + i.problem());
                else out.printf("%-24s %14d %10d %10d  %s%n", name, i.dataBytes(), i.blocks(), i.zeroedBlocks(), WHEN.format(i.lastWrite()));
            }
            out.flush();
            return 0;
        }
    }

    @Command(name = "discard", mixinStandardHelpOptions = true,
        description = {"Remove client overlay NAME from DIR: the client reads the base again.",
            "Refused while a server uses DIR.", ""})
    static final class Discard implements Callable<Integer> {
        @Parameters(index = "0", paramLabel = "DIR", description = "the cow-dir")
        Path dir;

        @Parameters(index = "1", paramLabel = "NAME", description = "the client's overlay")
        String name;

        @Override
        public Integer call() throws Exception {
            Overlays.discard(dir, name);
            return 0;
        }
    }

    @Command(name = "commit", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Write base plus client overlay NAME of DIR as NEW-IMAGE, a sparse file.",
            "NEW-IMAGE holds what the client reads through the export, as a disk of its own; blocks that",
            "read as zeroes are left as holes.",
            "The overlay records its base's size and fingerprint, not where it is: give the base with",
            "--base; a base the overlay was not made over is refused. Refused while a server uses DIR,",
            "and when NEW-IMAGE exists unless --force. The overlay is left as it is.",
            "A progress bar is drawn on stderr when stderr is a terminal.", ""},
        footer = {"", "Example: make pc42's disk an image of its own (the server stopped), then serve it:",
            "  jnbd overlay commit /var/lib/jnbd/boot pc42 /srv/pc42.img --base /srv/ltsp/base.img",
            "  jnbd serve --export 'pc42=file:/srv/pc42.img'"})
    static final class Commit implements Callable<Integer> {
        @Parameters(index = "0", paramLabel = "DIR", description = "the cow-dir")
        Path dir;

        @Parameters(index = "1", paramLabel = "NAME", description = "the client's overlay")
        String name;

        @Parameters(index = "2", paramLabel = "NEW-IMAGE", description = "the image to write")
        Path out;

        @Option(names = "--base", required = true, paramLabel = "BASE",
            description = "the base the overlay was made over: a file, or a backend as --export takes it (nbd:HOST/EXPORT, ...)")
        String base;

        @Option(names = "--force", description = "replace NEW-IMAGE if it exists")
        boolean force;

        @Option(names = "--progress", negatable = true,
            description = "draw a progress bar on stderr (default: only when stderr is a terminal)")
        Boolean progress;

        @Override
        public Integer call() throws Exception {
            String spec = Files.exists(Path.of(base)) ? "file:" + base + ",readonly" : base;
            try (Backend b = ExportSpec.parse("base", spec).open();
                 Progress bar = Progress.ofBytes("commit", b.size(), progress)) {
                Overlays.commit(dir, name, b, out, force, bar::stepTo);
            }
            return 0;
        }
    }
}
