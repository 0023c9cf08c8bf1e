package io.jnbd.tls;

/** A TLS setting cannot be used (a file missing or unreadable, a key that does not match its certificate): one line naming the file. */
public class TlsConfigException extends Exception {
    public TlsConfigException(String message) {
        super(message);
    }

    public TlsConfigException(String message, Throwable cause) {
        super(message, cause);
    }
}
