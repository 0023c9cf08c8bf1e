package io.jnbd.cli;

import io.jnbd.client.NbdConfigException;
import picocli.CommandLine;
import picocli.CommandLine.Command;

/** The {@code jnbd} command: one entry point, one subcommand per tool. */
@Command(name = "jnbd", mixinStandardHelpOptions = true, version = "jnbd 0.1.0",
    description = "Network block storage for the JVM: an NBD server, client tools and a memory pool.",
    subcommands = {ServeCommand.class, MemServerCommand.class, PoolCommand.class, BenchCommand.class, InfoCommand.class,
        CopyCommand.class, CmpCommand.class, CommandLine.HelpCommand.class})
public final class Main implements Runnable {

    public static void main(String[] args) {
        System.exit(commandLine().execute(args));
    }

    /** The configured command line, shared by main and the tests. */
    public static CommandLine commandLine() {
        CommandLine cl = new CommandLine(new Main());
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
        CommandLine.usage(this, System.out);
    }
}
