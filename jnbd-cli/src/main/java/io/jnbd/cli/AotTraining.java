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
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

/**
 * The training runs bin/jnbd records the JVM's AOT caches from ({@code -XX:AOTCacheOutput}): the short-lived
 * tools, each once, against memory exports, so that the classes and linkage they need are loaded from the cache
 * rather than from jars at every start. Output is discarded; a tool that fails here only makes the cache smaller,
 * so nothing is checked. Not a subcommand: users never run it.
 *
 * <p>Two caches, because JDK 25 loads and links every class of a cache when the JVM starts. {@code server} (the
 * default), for {@code serve}, {@code memserver} and help: the server runs in this process, so its classes are in
 * the cache. {@code client}, for every other command: the server runs in a child JVM, and help is left out (it reads
 * every tool's annotations, which loads the JDK's class-file API), so the cache holds only what the tools load: an
 * incremental copy finished 20 ms sooner with it (4%).
 */
final class AotTraining {

    private AotTraining() {
    }

    /** Where the training's tools find their exports: disk, copy and bm (dirty bitmap b0), each 4 MiB of memory. */
    private interface Served extends AutoCloseable {
        int port();

        @Override
        void close() throws Exception;
    }

    public static void main(String[] args) throws Exception {
        boolean client = args.length > 0 && args[0].equals("client");
        run("--version");
        if (!client) {
            run("--help");
            for (String tool : new String[]{"info", "copy", "cmp", "bench"}) run(tool, "--help");
        }
        Path dir = Files.createTempDirectory("jnbd-aot");
        Path file = dir.resolve("disk.img");
        Path bitmaps = dir.resolve("bitmaps");
        List<String> exports = List.of("disk=memory:4M", "copy=memory:4M",
            "bm=memory:4M,filter=dirty,dirty-bitmap=b0,dirty-dir=" + bitmaps);
        try (Served served = client ? inChild(exports, dir) : here(exports)) {
            String uri = "nbd://127.0.0.1:" + served.port() + "/disk";
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
            String other = "nbd://127.0.0.1:" + served.port() + "/copy";
            run("copy", "--no-progress", uri, other);
            run("cmp", uri, other);
            // An incremental copy: the metadata context negotiated, the bitmap walked, only its ranges copied.
            String marked = "nbd://127.0.0.1:" + served.port() + "/bm";
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

    private static Served here(List<String> specs) throws Exception {
        List<Export> exports = new java.util.ArrayList<>();
        for (String spec : specs) exports.add(ExportSpec.parse(spec).openExport());
        NbdServer server = new NbdServer(new Exports(exports, "disk"), ServerConfig.defaults());
        int port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))).getPort();
        return new Served() {
            @Override
            public int port() {
                return port;
            }

            @Override
            public void close() {
                server.close();
            }
        };
    }

    /**
     * {@code jnbd serve} in a JVM of its own, started as bin/jnbd starts one (without a cache), on a port it
     * picks and logs; a server that has not said where it listens within 30 s is stopped, and the tools then fail
     * to connect, which costs the cache their connected paths only.
     */
    private static Served inChild(List<String> specs, Path dir) throws Exception {
        String launcher = ProcessHandle.current().info().command().orElse("java");
        List<String> argv = new java.util.ArrayList<>(List.of(launcher, "--enable-native-access=ALL-UNNAMED",
            "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "-XX:+UseSerialGC", "-Xmx256m",
            "-cp", System.getProperty("java.class.path"), Main.class.getName(), "serve", "--listen", "127.0.0.1:0"));
        for (String spec : specs) argv.addAll(List.of("--export", spec));
        Path log = dir.resolve("serve.log");
        Process p = new ProcessBuilder(argv).redirectOutput(log.toFile()).redirectErrorStream(true).start();
        int port = 0;
        Pattern listening = Pattern.compile("listening on 127\\.0\\.0\\.1:(\\d+)");
        for (long until = System.nanoTime() + 30_000_000_000L; port == 0 && p.isAlive() && System.nanoTime() < until; ) {
            var m = listening.matcher(Files.readString(log));
            if (m.find()) port = Integer.parseInt(m.group(1));
            else Thread.sleep(50);
        }
        int bound = port;
        return new Served() {
            @Override
            public int port() {
                return bound;
            }

            @Override
            public void close() throws InterruptedException {
                p.destroy();
                if (!p.waitFor(10, TimeUnit.SECONDS)) p.destroyForcibly().waitFor();
            }
        };
    }

    private static void run(String... args) {
        var cl = Main.commandLine(args[0]);
        cl.setOut(new PrintWriter(Writer.nullWriter()));
        cl.setErr(new PrintWriter(Writer.nullWriter()));
        cl.execute(args);
    }
}
