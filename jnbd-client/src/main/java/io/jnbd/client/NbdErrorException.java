package io.jnbd.client;

import io.jnbd.protocol.Nbd;

/**
 * The server answered a request with an NBD error (a simple reply with a nonzero error, or an error chunk).
 * The message names the error (e.g. {@code EIO}), the request and the server's own message if it sent one.
 */
public class NbdErrorException extends NbdException {
    private final int error;
    private final String request;
    private final String serverMessage;

    public NbdErrorException(int error, String request, String serverMessage) {
        super(Nbd.errorName(error) + " from server for " + request
            + (serverMessage == null || serverMessage.isEmpty() ? "" : ": " + serverMessage));
        this.error = error;
        this.request = request;
        this.serverMessage = serverMessage == null ? "" : serverMessage;
    }

    /** The NBD error value, e.g. {@link Nbd#EIO}. */
    public int error() { return error; }

    /** The error's name, e.g. {@code "EIO"}. */
    public String errorName() { return Nbd.errorName(error); }

    /** The failed request, e.g. {@code READ(cookie=3, offset=0, length=65536)}. */
    public String request() { return request; }

    public String serverMessage() { return serverMessage; }
}
