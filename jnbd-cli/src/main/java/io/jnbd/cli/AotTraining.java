package io.jnbd.cli;

import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;

import java.io.PrintWriter;
import java.io.Writer;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * The training run bin/jnbd records the JVM's AOT cache from ({@code -XX:AOTCacheOutput}): the short-lived
 * tools, each once, against a memory export served in this process, so that the classes and linkage they need
 * are loaded from the cache rather than from jars at every start. Output is discarded; a tool that fails here
 * only makes the cache smaller, so nothing is checked. Not a subcommand: users never run it.
 */
final class AotTraining {

    private AotTraining() {
    }

    public static void main(String[] args) throws Exception {
        run("--help");
        run("--version");
        for (String tool : new String[]{"info", "copy", "cmp", "bench"}) run(tool, "--help");
        Path dir = Files.createTempDirectory("jnbd-aot");
        Path file = dir.resolve("disk.img");
        Path bitmaps = dir.resolve("bitmaps");
        List<Export> exports = List.of(ExportSpec.parse("disk=memory:4M").openExport(),
            ExportSpec.parse("copy=memory:4M").openExport(),
            ExportSpec.parse("bm=memory:4M,filter=dirty,dirty-bitmap=b0,dirty-dir=" + bitmaps).openExport());
        try (NbdServer server = new NbdServer(new Exports(exports, "disk"), ServerConfig.defaults())) {
            var at = (InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            String uri = "nbd://127.0.0.1:" + at.getPort() + "/disk";
            run("info", uri);
            run("info", "--json", uri);
            run("copy", "--no-progress", uri, file.toString());
            // Data, not only zeroes, so that the upload takes the write path.
            byte[] data = new byte[1 << 20];
            new java.util.Random(1).nextBytes(data);
            Files.write(file, data, java.nio.file.StandardOpenOption.WRITE);
            run("copy", "--no-progress", file.toString(), uri);
            run("cmp", file.toString(), uri);
            // Server to server: the splice path.
            String other = "nbd://127.0.0.1:" + at.getPort() + "/copy";
            run("copy", "--no-progress", uri, other);
            run("cmp", uri, other);
            // An incremental copy: the metadata context negotiated, the bitmap walked, only its ranges copied.
            String marked = "nbd://127.0.0.1:" + at.getPort() + "/bm";
            run("copy", "--no-progress", file.toString(), marked);
            run("copy", "--no-progress", "--bitmap", "b0", marked, file.toString());
        } finally {
            try (var left = Files.walk(dir)) {
                for (Path p : left.sorted(java.util.Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
            }
        }
        // As Main does after a failure: System.exit loads the JDK's logging classes (it asks a System.Logger
        // whether to log the exit), which the cache then holds too.
        System.exit(0);
    }

    private static void run(String... args) {
        var cl = Main.commandLine(args[0]);
        cl.setOut(new PrintWriter(Writer.nullWriter()));
        cl.setErr(new PrintWriter(Writer.nullWriter()));
        cl.execute(args);
    }
}
