package io.jnbd.client;

/** The connection failed or was lost; every request in flight on it fails with this. */
public class NbdConnectionException extends NbdException {
    public NbdConnectionException(String message, Throwable cause) {
        super(message, cause);
    }
}
