package io.jnbd.cli;

import io.jnbd.server.filter.cow.Overlays;
import java.nio.file.Path;
import java.time.ZoneId;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Parameters;

/** {@code jnbd overlay list DIR}, {@code jnbd overlay discard DIR NAME}: the overlays of a cow filter's cow-dir. */
@Command(name = "overlay", mixinStandardHelpOptions = true,
    description = {"The copy-on-write overlays a cow-dir holds (filter=cow, see docs/cow.md).", ""},
    subcommands = {OverlayCommand.ListOverlays.class, OverlayCommand.Discard.class})
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
}
