package io.jnbd.tls;

/** A client's TLS: PSK through BouncyCastle when given a key file, else X.509 through the JDK. */
final class ClientContext implements TlsClient {
    private final JdkTlsClient x509;
    private final BcPskClient psk;

    private ClientContext(JdkTlsClient x509, BcPskClient psk) {
        this.x509 = x509;
        this.psk = psk;
    }

    static ClientContext load(TlsClientSettings s, Versions versions) throws TlsConfigException {
        if (s.pskFile() != null) return new ClientContext(null, BcPskClient.load(PskFile.load(s.pskFile()), s.pskIdentity(), versions));
        return new ClientContext(JdkTlsClient.load(s, versions), null);
    }

    @Override
    public SecureChannel connect(RawChannel raw) throws TlsException {
        return psk != null ? psk.connect(raw) : x509.connect(raw);
    }
}
