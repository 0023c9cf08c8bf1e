package io.jnbd.client;

/** The server broke the protocol (bad magic, unknown cookie, chunk outside its request...); the connection is closed. */
public class NbdProtocolException extends NbdException {
    public NbdProtocolException(String message) {
        super(message);
    }
}
