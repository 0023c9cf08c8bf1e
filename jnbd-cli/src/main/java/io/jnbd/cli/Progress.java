package io.jnbd.cli;

import java.io.Console;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.text.DecimalFormat;

import me.tongfei.progressbar.ProgressBar;
import me.tongfei.progressbar.ProgressBarBuilder;
import me.tongfei.progressbar.ProgressBarStyle;

/**
 * A progress bar on stderr with rate and time left (me.tongfei:progressbar), or nothing at all: by default it
 * is drawn only when stderr is a terminal, so scripts, logs and tests see no output from it. When it is not
 * drawn the library is never touched, so it starts no thread and asks nothing of the terminal.
 */
final class Progress implements AutoCloseable {
    private static final Progress NONE = new Progress(null);

    private final ProgressBar bar;

    private Progress(ProgressBar bar) {
        this.bar = bar;
    }

    /** Bytes out of {@code total}, shown in MiB with their rate. {@code wanted}: the user's choice, null for "if on a terminal". */
    static Progress ofBytes(String task, long total, Boolean wanted) {
        if (!drawn(wanted)) return NONE;
        return new Progress(builder(task, total).setUnit(" MiB", 1 << 20).showSpeed(new DecimalFormat("0.0")).build());
    }

    /** Milliseconds out of {@code seconds}: a run of fixed length, whose figures go in {@link #say}. */
    static Progress ofSeconds(String task, long seconds, Boolean wanted) {
        if (!drawn(wanted)) return NONE;
        return new Progress(builder(task, seconds * 1000).setUnit(" s", 1000).build());
    }

    private static ProgressBarBuilder builder(String task, long max) {
        // ASCII: a terminal in the C locale shows Unicode blocks as question marks.
        return new ProgressBarBuilder().setTaskName(task).setInitialMax(max).setStyle(ProgressBarStyle.ASCII)
            .setUpdateIntervalMillis(250);
    }

    private static boolean drawn(Boolean wanted) {
        return wanted != null ? wanted : stderrIsTerminal();
    }

    void stepTo(long done) {
        if (bar != null) bar.stepTo(done);
    }

    void stepBy(long n) {
        if (bar != null) bar.stepBy(n);
    }

    /** Text after the bar, e.g. the figures so far. */
    void say(String message) {
        if (bar != null) bar.setExtraMessage(message);
    }

    /** Draws the final state and ends the line, so what is printed next starts on a line of its own. */
    @Override
    public void close() {
        if (bar != null) bar.close();
    }

    /**
     * isatty(2) through java.lang.foreign. The JDK has no test for stderr alone: {@link Console#isTerminal} asks
     * about stdin and stdout, so {@code jnbd copy a b 2>log} would draw into the log. It stays the fallback where
     * native calls are not allowed.
     */
    static boolean stderrIsTerminal() {
        try {
            Linker linker = Linker.nativeLinker();
            MethodHandle isatty = linker.downcallHandle(linker.defaultLookup().find("isatty").orElseThrow(),
                FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
            return (int) isatty.invokeExact(2) == 1;
        } catch (Throwable e) {
            Console c = System.console();
            return c != null && c.isTerminal();
        }
    }
}
