package io.jnbd.tls;

/** A client's TLS context: X.509 through the JDK, PSK through BouncyCastle (see {@link TlsServer}). */
public interface TlsClient {
    static TlsClient load(TlsClientSettings settings) throws TlsConfigException {
        throw new UnsupportedOperationException("not built yet");
    }

    /** Runs the client side of the TLS handshake on {@code raw}, right after the server accepted STARTTLS. */
    SecureChannel connect(RawChannel raw) throws TlsException;
}
