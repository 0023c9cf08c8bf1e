package io.jnbd.cli;

import java.io.PrintWriter;
import java.io.StringWriter;

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

    @Override
    public String toString() {
        return "exit " + exit + "\n--- out\n" + out + "--- err\n" + err;
    }
}
