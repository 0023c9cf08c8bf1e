package io.jnbd.cli;

import io.jnbd.client.NbdConfigException;
import picocli.CommandLine;
import picocli.CommandLine.Model.CommandSpec;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.Supplier;

/**
 * The {@code jnbd} command: one entry point, one subcommand per tool. Its own model is built in code, as
 * those of the short tools are ({@link Models}): every tool's start pays for it.
 */
public final class Main implements Runnable {

    private CommandSpec spec;

    /**
     * The subcommands, in the order help lists them. picocli builds a command's whole model (reflection over
     * every option) when it is added, 20-40 ms each before the JIT has warmed up: a process that runs one tool
     * adds only that one.
     */
    private static final Map<String, Supplier<Object>> TOOLS = new LinkedHashMap<>();

    /*
     * A look-up that finds nothing on the class path opens every one of its 35 jars (13,000 entries: 50-80 ms
     * here, the JVM's first use of ZipFile). picocli makes one, for groovy.lang.Closure, unless told not to;
     * System.exit makes another (see main). The JDK's search for a SelectorProvider service, which the first
     * socket makes, is skipped by bin/jnbd.
     */
    static {
        if (System.getProperty("picocli.disable.closures") == null) System.setProperty("picocli.disable.closures", "true");
        TOOLS.put("serve", ServeCommand::new);
        TOOLS.put("memserver", MemServerCommand::new);
        TOOLS.put("pool", PoolCommand::new);
        TOOLS.put("bench", BenchCommand::new);
        TOOLS.put("info", () -> new InfoCommand().model());
        TOOLS.put("copy", () -> new CopyCommand().model());
        TOOLS.put("cmp", () -> new CmpCommand().model());
        TOOLS.put("overlay", OverlayCommand::new);
        TOOLS.put("bitmap", BitmapCommand::new);
    }

    public static void main(String[] args) {
        int status = commandLine(args.length > 0 ? args[0] : null).execute(args);
        // Returning from main ends the JVM as System.exit(0) would (shutdown hooks, status 0) once no other
        // non-daemon thread is left, without System.exit asking a System.Logger whether to log the exit: that
        // logger's first use searches every jar for a LoggerFinder service (see above).
        if (status != 0 || otherUserThreads()) System.exit(status);
    }

    /** Whether a platform thread other than this one would keep the JVM alive after main returns. */
    private static boolean otherUserThreads() {
        ThreadGroup root = Thread.currentThread().getThreadGroup();
        while (root.getParent() != null) root = root.getParent();
        Thread[] threads = new Thread[root.activeCount() + 16];
        int n = root.enumerate(threads, true);
        if (n == threads.length) return true; // more than counted: not worth a second look
        for (int i = 0; i < n; i++) {
            Thread t = threads[i];
            if (t != Thread.currentThread() && !t.isDaemon() && t.isAlive()) return true;
        }
        return false;
    }

    /** The whole command line, every subcommand and help: the tests and the docs check use this. */
    public static CommandLine commandLine() {
        return commandLine(null);
    }

    /**
     * The command line for arguments starting with {@code first}: only that tool if it names one, none for the
     * version, else all of them.
     */
    static CommandLine commandLine(String first) {
        Main main = new Main();
        main.spec = Models.command(main, "jnbd",
            new String[]{"Network block storage for the JVM: an NBD server, client tools and a memory pool."}, new String[0])
            .version("jnbd 0.1.0");
        CommandLine cl = new CommandLine(main.spec);
        Supplier<Object> only = first == null ? null : TOOLS.get(first);
        if (only != null) {
            cl.addSubcommand(first, only.get());
        } else if (!"--version".equals(first) && !"-V".equals(first)) {
            TOOLS.forEach((name, tool) -> cl.addSubcommand(name, tool.get()));
            cl.addSubcommand("help", new CommandLine.HelpCommand());
        }
        // Bad arguments get one line and the usage hint, not a stack trace.
        cl.setParameterExceptionHandler((ex, args) -> {
            CommandLine cmd = ex.getCommandLine();
            cmd.getErr().println("jnbd: " + ex.getMessage());
            cmd.getErr().println("Try '" + cmd.getCommandSpec().qualifiedName() + " --help' for more information.");
            return 2;
        });
        cl.setExecutionExceptionHandler((ex, cmd, parseResult) -> {
            cmd.getErr().println("jnbd: " + (ex.getMessage() != null ? ex.getMessage() : ex.toString()));
            // Unusable TLS files are the user's setting, not a failure of the server: a usage error.
            return ex instanceof NbdConfigException ? 2 : 1;
        });
        return cl;
    }

    @Override
    public void run() {
        spec.commandLine().usage(System.out);
    }
}
