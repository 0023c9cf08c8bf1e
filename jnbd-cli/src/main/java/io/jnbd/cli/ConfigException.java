package io.jnbd.cli;

/**
 * A setting that cannot work, in one line for the user that says where it came from: {@code FILE:LINE: key: ...}
 * for the config file ({@link #inFile}), {@code --key: ...} for the command line. {@code jnbd serve} exits
 * with 2 on it.
 */
final class ConfigException extends RuntimeException {
    private final boolean inFile;

    ConfigException(String message) {
        this(message, false);
    }

    ConfigException(String message, boolean inFile) {
        super(message, null, false, false);
        this.inFile = inFile;
    }

    /** Whether the message starts with the file and line, as a compiler's would: then it needs no other prefix. */
    boolean inFile() {
        return inFile;
    }
}
