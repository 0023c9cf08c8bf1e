package io.jnbd.tls;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.net.Socket;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.security.cert.X509Certificate;
import javax.net.ssl.KeyManager;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.X509ExtendedTrustManager;

/** The X.509 half of a client: the JDK's TLS, trusting ca-cert.pem (or the JDK's store), with libnbd's client files. */
final class JdkTlsClient {
    private static final Logger log = LoggerFactory.getLogger(JdkTlsClient.class);

    private final SSLContext context;
    private final TlsClientSettings settings;
    private final Versions versions;

    private JdkTlsClient(SSLContext context, TlsClientSettings settings, Versions versions) {
        this.context = context;
        this.settings = settings;
        this.versions = versions;
    }

    static JdkTlsClient load(TlsClientSettings s, Versions versions) throws TlsConfigException {
        Path dir = s.certificates();
        X509ExtendedTrustManager trust;
        if (!s.verifyPeer()) {
            log.warn("TLS: the server's certificate is not verified (verify-peer off): any server, or anyone in between, is accepted");
            trust = TRUST_ANYONE;
        } else {
            if (s.serverName() == null || s.serverName().isEmpty()) {
                throw new TlsConfigException("verifying the server's certificate needs the name the client connected to");
            }
            trust = dir == null ? X509Files.defaultTrust() : X509Files.trust(dir.resolve("ca-cert.pem"), null);
        }
        KeyManager[] keys = null;
        if (dir != null) {
            Path cert = dir.resolve("client-cert.pem");
            Path key = dir.resolve("client-key.pem");
            if (X509Files.exists(cert) || X509Files.exists(key)) {
                keys = X509Files.credentials(cert, key).keyManagers();
            }
        }
        try {
            SSLContext context = SSLContext.getInstance("TLS");
            context.init(keys, new javax.net.ssl.TrustManager[] {trust}, new SecureRandom());
            return new JdkTlsClient(context, s, versions);
        } catch (Exception e) {
            throw new TlsConfigException("cannot set up TLS" + (dir == null ? "" : " from " + dir) + ": " + Pem.oneLine(e), e);
        }
    }

    SecureChannel connect(RawChannel raw) throws TlsException {
        String host = settings.serverName();
        SSLEngine e = host == null ? context.createSSLEngine() : context.createSSLEngine(host, -1);
        e.setUseClientMode(true);
        SSLParameters p = e.getSSLParameters();
        p.setProtocols(versions.jdk);
        p.setCipherSuites(Versions.aes128First(p.getCipherSuites()));
        // "HTTPS" identification: the server's DNS or IP subject alternative names must name the host.
        if (settings.verifyPeer()) p.setEndpointIdentificationAlgorithm("HTTPS");
        e.setSSLParameters(p);
        return JdkSecureChannel.handshake(e, raw, null);
    }

    private static final X509ExtendedTrustManager TRUST_ANYONE = new X509ExtendedTrustManager() {
        @Override public void checkClientTrusted(X509Certificate[] c, String a, Socket s) { }
        @Override public void checkServerTrusted(X509Certificate[] c, String a, Socket s) { }
        @Override public void checkClientTrusted(X509Certificate[] c, String a, SSLEngine e) { }
        @Override public void checkServerTrusted(X509Certificate[] c, String a, SSLEngine e) { }
        @Override public void checkClientTrusted(X509Certificate[] c, String a) { }
        @Override public void checkServerTrusted(X509Certificate[] c, String a) { }
        @Override public X509Certificate[] getAcceptedIssuers() {
            return new X509Certificate[0];
        }
    };
}
