package io.jnbd.cli;

import java.time.Duration;
import picocli.CommandLine;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine.Option;

/** {@code --reconnect-delay} (qemu's name for it), for the commands that are clients of a server that may restart. */
final class ReconnectOption {

    private static final String NAME = "--reconnect-delay";
    private static final String LABEL = "SECONDS";
    private static final String DEFAULT = "0";
    private static final String DESCRIPTION = "when the server drops a connection (a restart, a crash, NBD_ESHUTDOWN), "
        + "connect again for up to SECONDS, check that it is the same export, and send again what got no answer; "
        + "requests wait meanwhile and fail only if the server stays away longer (default: 0, off)";

    @Option(names = NAME, paramLabel = LABEL, defaultValue = DEFAULT, description = DESCRIPTION)
    double seconds;

    /** The same option for a command whose model is built in code ({@link Models}). */
    OptionSpec option() {
        return Models.option(NAME, double.class, () -> seconds, v -> seconds = v)
            .paramLabel(LABEL).defaultValue(DEFAULT).description(DESCRIPTION).build();
    }

    /** The delay, or a usage error for one that is negative or not a number. */
    Duration delay(CommandLine commandLine) {
        if (!(seconds >= 0) || seconds > Duration.ofDays(1).toSeconds()) {
            throw new CommandLine.ParameterException(commandLine,
                "--reconnect-delay must be between 0 and 86400 seconds, not " + seconds);
        }
        return Duration.ofNanos(Math.round(seconds * 1e9));
    }
}
