package io.jnbd.tls;

/** A client's TLS context: X.509 through the JDK, PSK through BouncyCastle (see {@link TlsServer}). */
public interface TlsClient {
    static TlsClient load(TlsClientSettings settings) throws TlsConfigException {
        return ClientContext.load(settings, Versions.TLS13_AND_12);
    }

    /** Runs the client side of the TLS handshake on {@code raw}, right after the server accepted STARTTLS. */
    SecureChannel connect(RawChannel raw) throws TlsException;
}
