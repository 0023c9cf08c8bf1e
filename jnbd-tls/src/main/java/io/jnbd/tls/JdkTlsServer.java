package io.jnbd.tls;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.security.SecureRandom;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManager;

/** The X.509 half of a server: the JDK's TLS with the key, chain, CAs and CRL of an nbdkit-style directory. */
final class JdkTlsServer {
    private final SSLContext context;
    private final boolean verifyPeer;
    private final Versions versions;
    private final String description;

    private JdkTlsServer(SSLContext context, boolean verifyPeer, Versions versions, String description) {
        this.context = context;
        this.verifyPeer = verifyPeer;
        this.versions = versions;
        this.description = description;
    }

    static JdkTlsServer load(Path dir, boolean verifyPeer, Versions versions) throws TlsConfigException {
        X509Files.Credentials own = X509Files.credentials(dir.resolve("server-cert.pem"), dir.resolve("server-key.pem"));
        Path ca = dir.resolve("ca-cert.pem");
        Path crl = dir.resolve("ca-crl.pem");
        // The CAs matter only to verify clients; nbdkit too reads them only then.
        TrustManager[] trust = null;
        if (verifyPeer) trust = new TrustManager[] {X509Files.trust(ca, X509Files.exists(crl) ? crl : null)};
        try {
            SSLContext context = SSLContext.getInstance("TLS");
            context.init(own.keyManagers(), trust, new SecureRandom());
            String d = "X.509 (" + Names.quoted(own.leaf()).replace("'", "") + ")"
                + (verifyPeer ? ", client certificates required" + (X509Files.exists(crl) ? " (with ca-crl.pem)" : "") : "");
            return new JdkTlsServer(context, verifyPeer, versions, d);
        } catch (Exception e) {
            throw new TlsConfigException(dir + ": cannot set up TLS: " + Pem.oneLine(e), e);
        }
    }

    SecureChannel accept(RawChannel raw, ByteBuffer received) throws TlsException {
        SSLEngine e = context.createSSLEngine();
        e.setUseClientMode(false);
        e.setEnabledProtocols(versions.jdk);
        e.setNeedClientAuth(verifyPeer);
        javax.net.ssl.SSLParameters p = e.getSSLParameters();
        p.setCipherSuites(Versions.aes128First(p.getCipherSuites()));
        p.setUseCipherSuitesOrder(true);
        e.setSSLParameters(p);
        return JdkSecureChannel.handshake(e, raw, received);
    }

    String describe() {
        return description;
    }
}
