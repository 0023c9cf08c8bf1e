package io.jnbd.client;

import java.io.IOException;

/** Base of the client's failures; a plain {@link IOException} so callers can treat it like any other I/O error. */
public class NbdException extends IOException {
    public NbdException(String message) {
        super(message);
    }

    public NbdException(String message, Throwable cause) {
        super(message, cause);
    }
}
