package io.jnbd.client;

/** A request got no complete reply within {@link ClientOptions#requestTimeout()}. */
public class NbdTimeoutException extends NbdException {
    public NbdTimeoutException(String message) {
        super(message);
    }
}
