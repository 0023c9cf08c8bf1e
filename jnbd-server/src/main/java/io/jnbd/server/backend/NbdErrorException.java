package io.jnbd.server.backend;

import io.jnbd.protocol.Nbd;
import java.io.IOException;

/** A failure that maps to a specific NBD error value rather than the generic {@code EIO}. */
public class NbdErrorException extends IOException {
    private final int error;

    public NbdErrorException(int error, String message) {
        super(message);
        this.error = error;
    }

    public int error() {
        return error;
    }

    /** The NBD error to report for any exception a backend throws. */
    public static int errorOf(Throwable t) {
        if (t instanceof NbdErrorException e) return e.error;
        if (t instanceof OutOfMemoryError) return Nbd.ENOMEM;
        return Nbd.EIO;
    }
}
