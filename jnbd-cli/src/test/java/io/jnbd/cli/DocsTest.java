package io.jnbd.cli;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.ExportTuning;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;
import picocli.CommandLine.Model.OptionSpec;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/** What the docs and help texts say about options, held against the options the code has. */
class DocsTest {

    /** Options of the other programs the docs show (java, fio, qemu-img, qemu-nbd, nbdkit, nbdinfo, perf). */
    private static final Set<String> OTHER_PROGRAMS = Set.of("--add-exports", "--aio", "--cache", "--children", "--direct",
        "--exit-with-parent", "--filter", "--invalidate", "--ioengine", "--iodepth", "--no-children", "--output-format",
        "--persistent", "--ramp", "--runtime", "--shared", "--sort", "--target-image-opts", "--time");

    @Test
    void everyOptionTheDocsNameInCodeExists() throws Exception {
        Set<String> ours = new TreeSet<>();
        collect(Main.commandLine(), ours);
        Path root = Path.of(System.getProperty("jnbd.root", ".."));
        List<Path> docs = new ArrayList<>(List.of(root.resolve("README.md")));
        try (Stream<Path> s = Files.list(root.resolve("docs"))) {
            // The performance log records past runs, options of their day included.
            s.filter(p -> p.toString().endsWith(".md") && !p.endsWith("performance-log.md")).forEach(docs::add);
        }
        try (Stream<Path> s = Files.list(root.resolve("docs/decisions"))) {
            s.filter(p -> p.toString().endsWith(".md")).forEach(docs::add);
        }
        Pattern inlineCode = Pattern.compile("`([^`\\n]+)`");
        Pattern option = Pattern.compile("(?<![\\w-])--[a-z][a-z-]*");
        List<String> unknown = new ArrayList<>();
        for (Path doc : docs) {
            Matcher code = inlineCode.matcher(Files.readString(doc));
            while (code.find()) {
                Matcher o = option.matcher(code.group(1));
                while (o.find()) {
                    String name = o.group();
                    if (!ours.contains(name) && !OTHER_PROGRAMS.contains(name)) unknown.add(root.relativize(doc) + ": " + name);
                }
            }
        }
        assertThat(docs).hasSizeGreaterThan(5);
        assertThat(unknown).as("options named in the docs that no jnbd command has").isEmpty();
    }

    @Test
    void serveHelpGivesTheSplitDefaultsTheCodeUses() {
        ExportTuning file = ExportSpec.parse("d=file:/nonexistent/d.img").tuning();
        ExportTuning memory = ExportSpec.parse("m=memory:1M").tuning();
        String help = Run.jnbd("serve", "--help").out().replaceAll("\\s+", " ");
        assertThat(help).contains("defaults " + (file.splitThreshold() >> 20) + "M, " + (file.chunkSize() >> 10) + "K, and "
            + file.streams() + " streams for files, " + memory.streams() + " for memory");
    }

    private static void collect(CommandLine cl, Set<String> names) {
        for (OptionSpec o : cl.getCommandSpec().options()) {
            for (String n : o.names()) {
                names.add(n);
                if (o.negatable() && n.startsWith("--")) names.add("--no-" + n.substring(2));
            }
        }
        cl.getSubcommands().values().forEach(sub -> collect(sub, names));
    }
}
