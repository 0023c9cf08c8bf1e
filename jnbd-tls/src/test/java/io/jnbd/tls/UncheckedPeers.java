package io.jnbd.tls;

import java.nio.file.Path;
import java.security.KeyStore;
import java.security.SecureRandom;
import java.util.List;
import java.net.Socket;
import java.security.Principal;
import java.security.PrivateKey;
import java.security.cert.X509Certificate;
import javax.net.ssl.KeyManager;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.TrustManager;
import javax.net.ssl.X509ExtendedKeyManager;
import javax.net.ssl.X509ExtendedTrustManager;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;

/**
 * X.509 peers that present whatever certificate they are given, even one our loaders refuse (expired, not yet
 * valid): to see what the other end says about it.
 */
final class UncheckedPeers {
    private UncheckedPeers() {}

    static TlsServer server(Path dir) throws Exception {
        SSLContext context = context(dir.resolve(TestPki.SERVER_CERT), dir.resolve(TestPki.SERVER_KEY));
        return new TlsServer() {
            @Override
            public SecureChannel accept(RawChannel raw, String peer) throws TlsException {
                SSLEngine e = context.createSSLEngine();
                e.setUseClientMode(false);
                return JdkSecureChannel.handshake(e, raw, null);
            }

            @Override
            public String describe() {
                return "unchecked";
            }
        };
    }

    static TlsClient client(Path dir) throws Exception {
        SSLContext context = context(dir.resolve(TestPki.CLIENT_CERT), dir.resolve(TestPki.CLIENT_KEY));
        return raw -> {
            SSLEngine e = context.createSSLEngine();
            e.setUseClientMode(true);
            return JdkSecureChannel.handshake(e, raw, null);
        };
    }

    private static SSLContext context(Path cert, Path key) throws Exception {
        KeyStore ks = KeyStore.getInstance("PKCS12");
        ks.load(null, null);
        List<java.security.cert.X509Certificate> chain = Pem.certificates(cert);
        ks.setKeyEntry("k", Pem.privateKey(key), new char[0], chain.toArray(java.security.cert.X509Certificate[]::new));
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(ks, new char[0]);
        X509ExtendedKeyManager keys = (X509ExtendedKeyManager) kmf.getKeyManagers()[0];
        SSLContext c = SSLContext.getInstance("TLS");
        c.init(new KeyManager[] {new Always(keys)}, new TrustManager[] {TRUST_ANYONE}, new SecureRandom());
        return c;
    }

    /** Presents its one key whatever the peer asks for: the JDK's own manager holds back a certificate of a CA the peer did not list. */
    private static final class Always extends X509ExtendedKeyManager {
        private final X509ExtendedKeyManager keys;

        Always(X509ExtendedKeyManager keys) {
            this.keys = keys;
        }

        @Override public String chooseEngineClientAlias(String[] t, Principal[] i, SSLEngine e) { return "k"; }
        @Override public String chooseEngineServerAlias(String t, Principal[] i, SSLEngine e) { return "k"; }
        @Override public String[] getClientAliases(String t, Principal[] i) { return new String[] {"k"}; }
        @Override public String chooseClientAlias(String[] t, Principal[] i, Socket s) { return "k"; }
        @Override public String[] getServerAliases(String t, Principal[] i) { return new String[] {"k"}; }
        @Override public String chooseServerAlias(String t, Principal[] i, Socket s) { return "k"; }
        @Override public X509Certificate[] getCertificateChain(String alias) { return keys.getCertificateChain(alias); }
        @Override public PrivateKey getPrivateKey(String alias) { return keys.getPrivateKey(alias); }
    }

    private static final X509ExtendedTrustManager TRUST_ANYONE = new X509ExtendedTrustManager() {
        @Override public void checkClientTrusted(X509Certificate[] c, String a, Socket s) { }
        @Override public void checkServerTrusted(X509Certificate[] c, String a, Socket s) { }
        @Override public void checkClientTrusted(X509Certificate[] c, String a, SSLEngine e) { }
        @Override public void checkServerTrusted(X509Certificate[] c, String a, SSLEngine e) { }
        @Override public void checkClientTrusted(X509Certificate[] c, String a) { }
        @Override public void checkServerTrusted(X509Certificate[] c, String a) { }
        @Override public X509Certificate[] getAcceptedIssuers() { return new X509Certificate[0]; }
    };
}
