package io.jnbd.tls;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** A server's TLS: X.509 through the JDK, PSK through BouncyCastle, or both, told apart by the ClientHello. */
final class ServerContext implements TlsServer {
    private static final Logger log = LoggerFactory.getLogger(ServerContext.class);

    private final JdkTlsServer x509;   // null: PSK only
    private final BcPskServer psk;     // null: X.509 only

    private ServerContext(JdkTlsServer x509, BcPskServer psk) {
        this.x509 = x509;
        this.psk = psk;
    }

    static ServerContext load(TlsServerSettings s, Versions versions) throws TlsConfigException {
        JdkTlsServer x509 = s.certificates() == null ? null : JdkTlsServer.load(s.certificates(), s.verifyPeer(), versions);
        BcPskServer psk = s.pskFile() == null ? null : BcPskServer.load(s.pskFile(), versions);
        return new ServerContext(x509, psk);
    }

    @Override
    public SecureChannel accept(RawChannel raw, String peer) throws TlsException {
        try {
            SecureChannel c;
            if (psk == null) {
                c = x509.accept(raw, null);
            } else if (x509 == null) {
                c = psk.accept(raw, null);
            } else {
                ClientHello.Routed hello = ClientHello.read(raw, id -> psk.keys().key(id) != null);
                c = hello.psk() ? psk.accept(raw, hello.records()) : x509.accept(raw, hello.records());
            }
            log.debug("TLS: {} {} as {}", peer, c.description(), c.peerIdentities());
            return c;
        } catch (TlsException e) {
            throw e;
        } catch (java.io.IOException e) {
            throw new TlsException("TLS handshake failed: " + Failures.why(e), e);
        }
    }

    @Override
    public String describe() {
        if (psk == null) return x509.describe();
        if (x509 == null) return psk.describe();
        return x509.describe() + "; " + psk.describe();
    }
}
