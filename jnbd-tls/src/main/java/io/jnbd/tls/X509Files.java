package io.jnbd.tls;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.Signature;
import java.security.cert.CertStore;
import java.security.cert.CertificateExpiredException;
import java.security.cert.CertificateNotYetValidException;
import java.security.cert.CollectionCertStoreParameters;
import java.security.cert.PKIXBuilderParameters;
import java.security.cert.X509CRL;
import java.security.cert.X509CertSelector;
import java.security.cert.X509Certificate;
import java.security.interfaces.RSAKey;
import java.util.List;
import javax.net.ssl.CertPathTrustManagerParameters;
import javax.net.ssl.KeyManager;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedTrustManager;

/** Turns the PEM files of a certificates directory into the JDK's key and trust managers, checking them first. */
final class X509Files {
    private static final char[] NO_PASSWORD = new char[0];

    private X509Files() {}

    /** A key and the chain that certifies it. */
    record Credentials(PrivateKey key, List<X509Certificate> chain) {
        X509Certificate leaf() {
            return chain.getFirst();
        }

        KeyManager[] keyManagers() throws TlsConfigException {
            try {
                KeyStore ks = KeyStore.getInstance("PKCS12");
                ks.load(null, null);
                ks.setKeyEntry("key", key, NO_PASSWORD, chain.toArray(X509Certificate[]::new));
                KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
                kmf.init(ks, NO_PASSWORD);
                return kmf.getKeyManagers();
            } catch (Exception e) {
                throw new TlsConfigException("cannot use the key of " + Names.quoted(leaf()) + ": " + Pem.oneLine(e), e);
            }
        }
    }

    /** Reads a certificate (chain) and its key; refuses a certificate out of its validity period or a key that is not its own. */
    static Credentials credentials(Path certFile, Path keyFile) throws TlsConfigException {
        List<X509Certificate> chain = Pem.certificates(certFile);
        PrivateKey key = Pem.privateKey(keyFile);
        X509Certificate leaf = chain.getFirst();
        try {
            leaf.checkValidity();
        } catch (CertificateExpiredException e) {
            throw new TlsConfigException(certFile + ": certificate " + Names.quoted(leaf) + " expired on " + leaf.getNotAfter().toInstant());
        } catch (CertificateNotYetValidException e) {
            throw new TlsConfigException(certFile + ": certificate " + Names.quoted(leaf) + " is not valid before " + leaf.getNotBefore().toInstant());
        }
        if (!matches(key, leaf)) {
            throw new TlsConfigException(keyFile + ": this key does not belong to the certificate in " + certFile);
        }
        return new Credentials(key, chain);
    }

    private static boolean matches(PrivateKey key, X509Certificate cert) throws TlsConfigException {
        if (key instanceof RSAKey rsa && cert.getPublicKey() instanceof RSAKey pub) {
            return rsa.getModulus().equals(pub.getModulus());
        }
        String algorithm = switch (key.getAlgorithm()) {
            case "EC" -> "SHA256withECDSA";
            case "Ed25519", "Ed448", "EdDSA" -> "EdDSA";
            case "RSA", "RSASSA-PSS" -> null; // public key of another kind: mismatch
            default -> throw new TlsConfigException("keys of type " + key.getAlgorithm() + " are not supported");
        };
        if (algorithm == null) return false;
        // Sign and verify a probe: works for every curve without computing a public point by hand.
        try {
            byte[] probe = "jnbd key check".getBytes(StandardCharsets.US_ASCII);
            Signature s = Signature.getInstance(algorithm);
            s.initSign(key);
            s.update(probe);
            byte[] signature = s.sign();
            Signature v = Signature.getInstance(algorithm);
            v.initVerify(cert.getPublicKey());
            v.update(probe);
            return v.verify(signature);
        } catch (GeneralSecurityException e) {
            return false;
        }
    }

    /** Trust in the CAs of {@code caFile}, checking revocation against {@code crlFile} when there is one. */
    static X509ExtendedTrustManager trust(Path caFile, Path crlFile) throws TlsConfigException {
        List<X509Certificate> cas = Pem.certificates(caFile);
        List<X509CRL> crls = crlFile == null ? List.of() : Pem.crls(crlFile);
        try {
            KeyStore anchors = KeyStore.getInstance("PKCS12");
            anchors.load(null, null);
            for (int i = 0; i < cas.size(); i++) anchors.setCertificateEntry("ca" + i, cas.get(i));
            PKIXBuilderParameters params = new PKIXBuilderParameters(anchors, new X509CertSelector());
            // Revocation is checked only against the CRL given: no OCSP, no fetching of distribution points.
            params.setRevocationEnabled(!crls.isEmpty());
            if (!crls.isEmpty()) {
                params.addCertStore(CertStore.getInstance("Collection", new CollectionCertStoreParameters(crls)));
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance("PKIX");
            tmf.init(new CertPathTrustManagerParameters(params));
            return new CheckedTrust(extended(tmf.getTrustManagers()), caFile.getFileName().toString());
        } catch (Exception e) {
            throw new TlsConfigException(caFile + ": cannot trust these CAs: " + Pem.oneLine(e), e);
        }
    }

    /** The JDK's default trust store (cacerts), for clients given no certificates directory. */
    static X509ExtendedTrustManager defaultTrust() throws TlsConfigException {
        try {
            TrustManagerFactory tmf = TrustManagerFactory.getInstance("PKIX");
            tmf.init((KeyStore) null);
            return new CheckedTrust(extended(tmf.getTrustManagers()), "the JDK's trust store");
        } catch (Exception e) {
            throw new TlsConfigException("cannot load the JDK's default trust store: " + Pem.oneLine(e), e);
        }
    }

    private static X509ExtendedTrustManager extended(TrustManager[] managers) {
        for (TrustManager m : managers) {
            if (m instanceof X509ExtendedTrustManager x) return x;
        }
        throw new IllegalStateException("the JDK offers no X509ExtendedTrustManager");
    }

    static boolean exists(Path p) {
        return Files.exists(p);
    }
}
