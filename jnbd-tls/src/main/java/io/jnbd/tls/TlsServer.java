package io.jnbd.tls;

/**
 * A server's TLS context, loaded once from its settings and shared by every connection. X.509 sessions go through
 * the JDK's own TLS (SSLEngine); PSK sessions through BouncyCastle's TLS, since the JDK has no API for an external
 * pre-shared key.
 */
public interface TlsServer {
    /** Loads the certificates, key and PSK file; checks that they are usable. */
    static TlsServer load(TlsServerSettings settings) throws TlsConfigException {
        return ServerContext.load(settings, Versions.TLS13_AND_12);
    }

    /**
     * Runs the server side of the TLS handshake on {@code raw} (right after the STARTTLS reply was sent) and
     * returns the session. {@code peer} names the client in log lines.
     */
    SecureChannel accept(RawChannel raw, String peer) throws TlsException;

    /** One line for the startup log: e.g. "X.509 (CN=server.example), client certificates required; PSK (3 identities)". */
    String describe();
}
