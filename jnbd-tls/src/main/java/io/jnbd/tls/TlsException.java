package io.jnbd.tls;

import java.io.IOException;

/**
 * A TLS session could not be established or broke: the message is one line saying why, fit for the log of the
 * connection it ends ("client certificate missing", "unknown PSK identity 'alice'", "certificate expired on ...").
 */
public class TlsException extends IOException {
    public TlsException(String message) {
        super(message);
    }

    public TlsException(String message, Throwable cause) {
        super(message, cause);
    }
}
