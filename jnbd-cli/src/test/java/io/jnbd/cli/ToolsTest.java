package io.jnbd.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/** The tools without any peer: help texts, bad input, and file-to-file copy and cmp. */
class ToolsTest {

    @Test
    void everyToolHasHelpWithExamples() {
        for (String tool : new String[]{"info", "copy", "cmp"}) {
            Run r = Run.jnbd(tool, "--help");
            assertThat(r.exit()).as(tool).isZero();
            assertThat(r.out()).as(tool).contains("Usage: jnbd " + tool, "Examples:", "jnbd " + tool + " ");
        }
    }

    /**
     * picocli lists each command with the first line of its description: that line must be a whole sentence, not
     * the first line of a wrapped paragraph. Checked in every help that lists commands ({@code jnbd}, {@code jnbd pool}).
     */
    @Test
    void everyCommandSummaryInHelpIsAWholeSentence() {
        List<String> seen = new ArrayList<>();
        checkSummaries(Main.commandLine(), seen);
        assertThat(seen).as("commands listed").contains("jnbd serve", "jnbd memserver", "jnbd pool", "jnbd pool status",
            "jnbd bench", "jnbd info", "jnbd copy", "jnbd cmp", "jnbd overlay", "jnbd overlay commit", "jnbd bitmap",
            "jnbd bitmap rotate", "jnbd help");
    }

    private static void checkSummaries(CommandLine cl, List<String> seen) {
        if (cl.getSubcommands().isEmpty()) return;
        String name = cl.getCommandSpec().qualifiedName();
        String help = cl.getUsageMessage(CommandLine.Help.Ansi.OFF);
        Map<String, String> listed = commandsListed(help);
        assertThat(listed.keySet()).as("commands in '%s --help'", name).containsExactlyElementsOf(cl.getSubcommands().keySet());
        listed.forEach((command, summary) -> {
            seen.add(name + " " + command);
            assertThat(summary).as("summary of '%s %s' in:%n%s", name, command, help).matches("[A-Z].*[.!?]");
        });
        for (CommandLine sub : cl.getSubcommands().values()) checkSummaries(sub, seen);
    }

    /** The "Commands:" section of a help text: each command with its summary, wrapped lines joined. */
    private static Map<String, String> commandsListed(String help) {
        Map<String, String> out = new LinkedHashMap<>();
        String current = null;
        boolean inSection = false;
        for (String line : help.lines().toList()) {
            if (line.equals("Commands:")) {
                inSection = true;
            } else if (inSection) {
                if (line.isBlank() || !line.startsWith("  ")) break;
                Matcher m = Pattern.compile("^  (\\S+)\\s+(.*)$").matcher(line);
                if (!line.startsWith("   ") && m.matches()) {
                    current = m.group(1);
                    out.put(current, m.group(2).strip());
                } else {
                    out.merge(current, line.strip(), (a, b) -> a + " " + b);
                }
            }
        }
        return out;
    }

    @Test
    void everyUriToolExplainsNbdsUris() {
        for (String tool : new String[]{"info", "copy", "cmp", "bench"}) {
            Run r = Run.jnbd(tool, "--help");
            assertThat(r.out()).as(tool).contains("nbds://", "tls-certificates=", "tls-psk-file=", "tls-verify-peer=false",
                "tls-hostname=");
            assertThat(r.out().lines().filter(l -> l.contains("jnbd " + tool + " ") && l.contains("nbds://"))).as(tool).isNotEmpty();
        }
    }

    @Test
    void unusableTlsFilesAreUsageErrorsNamingTheFile(@TempDir Path dir) {
        Path missing = dir.resolve("no-such-dir");
        Path noKeys = dir.resolve("none.psk");
        for (String[] args : new String[][]{{"info", "nbds://127.0.0.1:1/x?tls-certificates=" + missing},
            {"copy", "nbds://127.0.0.1:1/x?tls-psk-file=" + noKeys, dir.resolve("out").toString()},
            {"bench", "--duration", "1", "nbds://127.0.0.1:1/x?tls-certificates=" + missing}}) {
            Run r = Run.jnbd(args);
            assertThat(r.exit()).as(r.toString()).isEqualTo(2);
            assertThat(r.err().strip().lines().count()).as(r.toString()).isEqualTo(1);
            assertThat(r.err()).startsWith("jnbd: ").contains(args[0].equals("copy") ? noKeys.toString() : missing.toString());
        }
        Run cmp = Run.jnbd("cmp", "nbds://127.0.0.1:1/x?tls-certificates=" + missing, "nbd://127.0.0.1:1/");
        assertThat(cmp.exit()).isEqualTo(2);
        assertThat(cmp.err()).contains(missing.toString());
    }

    @Test
    void badUriIsOneLineAndNonZero() {
        for (String[] args : new String[][]{{"info", "http://example.org/x"}, {"info", "nbd+unix:///x"},
            {"copy", "nbd://h/x?tls-certificates=/c", "/tmp/never"}, {"info", "nbds://h/x?tls-verify-peer=maybe"},
            {"info", "nbd://127.0.0.1:1/x"}}) {
            Run r = Run.jnbd(args);
            assertThat(r.exit()).as(r.toString()).isNotZero();
            assertThat(r.err().strip().lines().count()).as(r.toString()).isEqualTo(1);
            assertThat(r.err()).startsWith("jnbd: ");
        }
        Run cmp = Run.jnbd("cmp", "ftp://x/y", "nbd://127.0.0.1:1/");
        assertThat(cmp.exit()).isEqualTo(2);
        assertThat(cmp.err().strip().lines().count()).isEqualTo(1);
    }

    @Test
    void missingFileIsOneLine(@TempDir Path dir) {
        Run r = Run.jnbd("copy", dir.resolve("nope").toString(), dir.resolve("out").toString());
        assertThat(r.exit()).isNotZero();
        assertThat(r.err()).contains("nope").contains("no such file");
        assertThat(r.err().strip().lines().count()).isEqualTo(1);
    }

    @Test
    void fileToFileCopyIsIdenticalAndSparseAndCmpSeesDifferences(@TempDir Path dir) throws Exception {
        Path src = dir.resolve("src.img");
        Path dst = dir.resolve("dst.img");
        byte[] block = new byte[1 << 20];
        new Random(1).nextBytes(block);
        try (RandomAccessFile f = new RandomAccessFile(src.toFile(), "rw")) {
            f.setLength(64L << 20);
            f.seek(3L << 20);
            f.write(block);
            f.seek(40L << 20);
            f.write(block, 0, 12345);
        }
        Files.writeString(dst, "old content that must go");
        Run copy = Run.jnbd("copy", src.toString(), dst.toString());
        assertThat(copy.exit()).as(copy.toString()).isZero();
        assertThat(Files.mismatch(src, dst)).isEqualTo(-1);
        // Zero chunks were skipped: the copy is as sparse as the data allows.
        long allocated = allocatedBytes(dst);
        assertThat(allocated).isLessThan(8L << 20);

        assertThat(Run.jnbd("cmp", src.toString(), dst.toString()).exit()).isZero();
        try (RandomAccessFile f = new RandomAccessFile(dst.toFile(), "rw")) {
            f.seek((40L << 20) + 7);
            f.write(~block[7]);
        }
        Run differ = Run.jnbd("cmp", src.toString(), dst.toString());
        assertThat(differ.exit()).isEqualTo(1);
        assertThat(differ.out()).contains("differ", "offset " + ((40L << 20) + 7));

        try (RandomAccessFile f = new RandomAccessFile(dst.toFile(), "rw")) {
            f.setLength(1 << 20);
        }
        Run sizes = Run.jnbd("cmp", src.toString(), dst.toString());
        assertThat(sizes.exit()).isEqualTo(1);
        assertThat(sizes.out()).contains("sizes differ");
    }

    /** Bytes the file really occupies; the JDK has no API for it, stat(1) has. */
    static long allocatedBytes(Path file) throws Exception {
        Process p = new ProcessBuilder("stat", "-c", "%b %B", file.toString()).start();
        String[] f = new String(p.getInputStream().readAllBytes()).trim().split(" ");
        p.waitFor();
        return Long.parseLong(f[0]) * Long.parseLong(f[1]);
    }
}
