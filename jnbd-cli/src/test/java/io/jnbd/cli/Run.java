package io.jnbd.cli;

import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** Runs the jnbd command line in-process and captures what it prints. */
record Run(int exit, String out, String err) {

    static Run jnbd(String... args) {
        StringWriter out = new StringWriter();
        StringWriter err = new StringWriter();
        var cl = Main.commandLine();
        cl.setOut(new PrintWriter(out, true));
        cl.setErr(new PrintWriter(err, true));
        int exit = cl.execute(args);
        return new Run(exit, out.toString(), err.toString());
    }

    /**
     * Runs the jnbd command line in a JVM of its own, started with {@code jvmOptions} and this JVM's class path,
     * and waits for it up to 60 s; out holds its stdout and stderr together, err is empty. A JVM still running
     * then is killed and reported with exit -1.
     */
    static Run jnbdInJvm(List<String> jvmOptions, String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElseThrow());
        cmd.addAll(jvmOptions);
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), Main.class.getName()));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        try {
            boolean ended = p.waitFor(60, TimeUnit.SECONDS);
            String out = new String(p.getInputStream().readNBytes(64 << 10));
            return new Run(ended ? p.exitValue() : -1, out, "");
        } finally {
            p.destroyForcibly();
        }
    }

    @Override
    public String toString() {
        return "exit " + exit + "\n--- out\n" + out + "--- err\n" + err;
    }
}
