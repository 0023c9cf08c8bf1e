package io.jnbd.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

import java.io.InputStream;
import java.lang.classfile.ClassFile;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

import static org.assertj.core.api.Assertions.assertThat;

/** What bin/jnbd's quick start rests on: one tool's model per process, and picocli rewritten for the AOT cache. */
class StartupTest {

    @Test
    void aToolsProcessBuildsOnlyThatTool() {
        CommandLine info = Main.commandLine("info");
        assertThat(info.getSubcommands().keySet()).containsExactly("info");
        CommandLine version = Main.commandLine("--version");
        assertThat(version.getSubcommands()).isEmpty();
        // Anything else, help and mistakes included, sees every tool.
        for (String first : new String[]{null, "--help", "help", "nonsense"}) {
            assertThat(Main.commandLine(first).getSubcommands().keySet()).as(first)
                .containsExactly("serve", "memserver", "pool", "bench", "info", "copy", "cmp", "overlay", "bitmap", "help");
        }
        Run bad = Run.jnbd("nonsense");
        assertThat(bad.exit()).isEqualTo(2);
        assertThat(bad.err()).contains("nonsense");
    }

    /**
     * copy's model is written in code (nothing read from annotations): each option still lands in its field, with
     * its default when absent, and a second parse of the same command line starts from those defaults again.
     */
    @Test
    void copysHandBuiltModelBindsEveryOptionAndItsDefault() {
        CommandLine cl = Main.commandLine("copy");
        CommandLine copy = cl.getSubcommands().get("copy");
        cl.parseArgs("copy", "--no-splice", "--connections", "2", "--requests", "8", "--request-size", "65536",
            "--timeout", "5", "--reconnect-delay", "1.5", "--progress", "--bitmap", "b0", "nbd://h/x", "out.raw");
        CopyCommand set = (CopyCommand) copy.getCommand();
        assertThat(set.source).isEqualTo("nbd://h/x");
        assertThat(set.destination).isEqualTo("out.raw");
        assertThat(new int[]{set.connections, set.requests, set.requestSize, set.timeoutSeconds}).containsExactly(2, 8, 65536, 5);
        assertThat(set.reconnect.seconds).isEqualTo(1.5);
        assertThat(set.splice).isFalse();
        assertThat(set.progress).isTrue();
        assertThat(set.bitmap).isEqualTo("b0");

        cl.parseArgs("copy", "a", "b");
        assertThat(new int[]{set.connections, set.requests, set.requestSize, set.timeoutSeconds}).containsExactly(4, 32, 1 << 20, 60);
        assertThat(set.reconnect.seconds).isZero();
        assertThat(set.splice).isTrue();
        assertThat(set.progress).isNull();
        assertThat(set.bitmap).isNull();
        assertThat(List.of(set.source, set.destination)).containsExactly("a", "b");

        Run missing = Run.jnbd("copy", "a");
        assertThat(missing.exit()).isEqualTo(2);
        assertThat(missing.err()).contains("Missing required parameter: 'DST'");
        Run help = Run.jnbd("copy", "--help");
        assertThat(help.exit()).isZero();
        assertThat(help.out()).contains("Usage: jnbd copy [-hV]", "--[no-]splice", "--reconnect-delay=SECONDS",
            "(default: 32)", "Examples:");
    }

    @Test
    void infoAndCmpHandBuiltModelsBindTheirOptions() {
        CommandLine info = Main.commandLine("info");
        info.parseArgs("info", "--json", "--list", "nbd://h/");
        InfoCommand i = (InfoCommand) info.getSubcommands().get("info").getCommand();
        assertThat(List.of(i.uri, i.list, i.json)).containsExactly("nbd://h/", true, true);
        info.parseArgs("info", "nbd://h/x");
        assertThat(List.of(i.uri, i.list, i.json)).containsExactly("nbd://h/x", false, false);

        CommandLine cmp = Main.commandLine("cmp");
        cmp.parseArgs("cmp", "--requests", "3", "--quiet", "a", "b");
        CmpCommand c = (CmpCommand) cmp.getSubcommands().get("cmp").getCommand();
        assertThat(List.of(c.first, c.second, c.requests, c.quiet)).containsExactly("a", "b", 3, true);
        cmp.parseArgs("cmp", "x", "y");
        assertThat(List.of(c.requests, c.quiet)).containsExactly(8, false);
        assertThat(cmp.getSubcommands().get("cmp").getCommandSpec().exitCodeOnInvalidInput()).isEqualTo(2);
        assertThat(Run.jnbd("cmp", "a").exit()).isEqualTo(2);
    }

    @Test
    void picocliIsRewrittenAsVerifiableJava6ClassFilesThatStillWork(@TempDir Path dir) throws Exception {
        Path jar = Path.of(CommandLine.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        Path copy = dir.resolve(jar.getFileName());
        assertThat(OldClassFiles.rewrite(jar, copy)).isTrue();

        List<String> classes = new ArrayList<>();
        try (JarFile original = new JarFile(jar.toFile()); JarFile rewritten = new JarFile(copy.toFile())) {
            assertThat(rewritten.size()).isEqualTo(original.size());
            for (JarEntry e : rewritten.stream().toList()) {
                if (!e.getName().endsWith(".class") || e.getName().contains("module-info")) continue;
                byte[] bytes;
                try (InputStream in = rewritten.getInputStream(e)) {
                    bytes = in.readAllBytes();
                }
                var model = ClassFile.of().parse(bytes);
                assertThat(model.majorVersion()).as(e.getName()).isEqualTo(ClassFile.JAVA_6_VERSION);
                // Checked against the new stack maps, as the JVM's split verifier would.
                assertThat(ClassFile.of().verify(bytes)).as(e.getName()).isEmpty();
                classes.add(e.getName());
            }
        }
        assertThat(classes).hasSizeGreaterThan(100);

        // And it still parses a command line and prints help, loaded on its own.
        try (URLClassLoader loader = new URLClassLoader(new URL[]{copy.toUri().toURL()}, ClassLoader.getPlatformClassLoader())) {
            Class<?> commandLine = Class.forName("picocli.CommandLine", true, loader);
            assertThat(commandLine.getClassLoader()).isSameAs(loader);
            Object help = Class.forName("picocli.CommandLine$HelpCommand", true, loader).getConstructor().newInstance();
            Object cl = commandLine.getConstructor(Object.class).newInstance(help);
            String usage = (String) commandLine.getMethod("getUsageMessage").invoke(cl);
            assertThat(usage).contains("Usage: help", "COMMAND");
        }
    }

    @Test
    void jarsWithoutOldClassFilesAreLeftAlone(@TempDir Path dir) throws Exception {
        Path jar = Path.of(com.fasterxml.jackson.databind.ObjectMapper.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        assertThat(OldClassFiles.rewrite(jar, dir.resolve("x.jar"))).isFalse();
        assertThat(Files.exists(dir.resolve("x.jar"))).isFalse();
    }
}
