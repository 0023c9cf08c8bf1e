package io.jnbd.cli;

import java.time.Duration;
import picocli.CommandLine;
import picocli.CommandLine.Option;

/** {@code --reconnect-delay} (qemu's name for it), for the commands that are clients of a server that may restart. */
final class ReconnectOption {

    @Option(names = "--reconnect-delay", paramLabel = "SECONDS", defaultValue = "0",
        description = "when the server drops a connection (a restart, a crash, NBD_ESHUTDOWN), connect again for up "
            + "to SECONDS, check that it is the same export, and send again what got no answer; requests wait "
            + "meanwhile and fail only if the server stays away longer (default: 0, off)")
    double seconds;

    /** The delay, or a usage error for one that is negative or not a number. */
    Duration delay(CommandLine commandLine) {
        if (!(seconds >= 0) || seconds > Duration.ofDays(1).toSeconds()) {
            throw new CommandLine.ParameterException(commandLine,
                "--reconnect-delay must be between 0 and 86400 seconds, not " + seconds);
        }
        return Duration.ofNanos(Math.round(seconds * 1e9));
    }
}
