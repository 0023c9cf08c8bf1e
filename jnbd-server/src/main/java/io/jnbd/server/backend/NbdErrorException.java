package io.jnbd.server.backend;

import java.io.IOException;

/** A failure that names its NBD error itself (see {@link NbdErrors} for how every other failure is mapped). */
public class NbdErrorException extends IOException {
    private final int error;

    public NbdErrorException(int error, String message) {
        super(message);
        this.error = error;
    }

    public int error() {
        return error;
    }
}
