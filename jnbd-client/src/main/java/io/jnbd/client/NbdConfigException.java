package io.jnbd.client;

/**
 * The client's own settings cannot be used: a TLS certificate directory, key or PSK file is missing, unreadable
 * or malformed. Raised before anything is sent; the message is one line naming the file.
 */
public class NbdConfigException extends NbdException {
    public NbdConfigException(String message, Throwable cause) {
        super(message, cause);
    }
}
