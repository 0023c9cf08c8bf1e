package io.jnbd.protocol;

/** The peer sent bytes that break the protocol: a bad magic, an impossible length, a malformed message. */
public class ProtocolException extends Exception {
    public ProtocolException(String message) {
        super(message);
    }
}
