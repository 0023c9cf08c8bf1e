package io.jnbd.tls;

import org.bouncycastle.asn1.ASN1ObjectIdentifier;
import org.bouncycastle.asn1.pkcs.PrivateKeyInfo;
import org.bouncycastle.cert.X509CRLHolder;
import org.bouncycastle.cert.X509CertificateHolder;
import org.bouncycastle.cert.jcajce.JcaX509CRLConverter;
import org.bouncycastle.cert.jcajce.JcaX509CertificateConverter;
import org.bouncycastle.openssl.PEMEncryptedKeyPair;
import org.bouncycastle.openssl.PEMKeyPair;
import org.bouncycastle.openssl.PEMParser;
import org.bouncycastle.openssl.jcajce.JcaPEMKeyConverter;
import org.bouncycastle.pkcs.PKCS8EncryptedPrivateKeyInfo;

import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.PrivateKey;
import java.security.cert.X509CRL;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.List;

/**
 * Reads the PEM files certtool and openssl write: certificates, CRLs and unencrypted private keys in PKCS#8,
 * PKCS#1 (RSA) or SEC1 (EC) form. Every failure is one line naming the file.
 */
final class Pem {
    // The converters use the JDK's providers: BouncyCastle only parses here, it is never registered.
    private static final JcaX509CertificateConverter CERTIFICATES = new JcaX509CertificateConverter();
    private static final JcaX509CRLConverter CRLS = new JcaX509CRLConverter();
    private static final JcaPEMKeyConverter KEYS = new JcaPEMKeyConverter();

    private Pem() {}

    /** Every certificate in {@code file}, in order (a chain: the end entity first); at least one. */
    static List<X509Certificate> certificates(Path file) throws TlsConfigException {
        List<X509Certificate> out = new ArrayList<>();
        for (Object o : objects(file)) {
            if (o instanceof X509CertificateHolder h) {
                try {
                    out.add(CERTIFICATES.getCertificate(h));
                } catch (Exception e) {
                    throw new TlsConfigException(file + ": unusable certificate: " + e.getMessage(), e);
                }
            }
        }
        if (out.isEmpty()) throw new TlsConfigException(file + ": no PEM certificate in it");
        return out;
    }

    /** The one private key in {@code file}. */
    static PrivateKey privateKey(Path file) throws TlsConfigException {
        PrivateKey key = null;
        for (Object o : objects(file)) {
            PrivateKey k;
            try {
                k = switch (o) {
                    case PrivateKeyInfo pkcs8 -> KEYS.getPrivateKey(pkcs8);
                    // SEC1 keys may leave out their public half, so convert the private part alone
                    case PEMKeyPair pkcs1OrSec1 -> KEYS.getPrivateKey(pkcs1OrSec1.getPrivateKeyInfo());
                    case PKCS8EncryptedPrivateKeyInfo e -> throw new TlsConfigException(file + ": the key is encrypted; give it unencrypted (as certtool and psktool write them)");
                    case PEMEncryptedKeyPair e -> throw new TlsConfigException(file + ": the key is encrypted; give it unencrypted (as certtool and psktool write them)");
                    // openssl ecparam -genkey writes the curve's name before the key
                    case ASN1ObjectIdentifier curve -> null;
                    default -> null;
                };
            } catch (TlsConfigException e) {
                throw e;
            } catch (Exception e) {
                throw new TlsConfigException(file + ": unusable private key: " + e.getMessage(), e);
            }
            if (k == null) continue;
            if (key != null) throw new TlsConfigException(file + ": more than one private key in it");
            key = k;
        }
        if (key == null) throw new TlsConfigException(file + ": no PEM private key in it");
        return key;
    }

    /** The CRLs in {@code file}; at least one. */
    static List<X509CRL> crls(Path file) throws TlsConfigException {
        List<X509CRL> out = new ArrayList<>();
        for (Object o : objects(file)) {
            if (o instanceof X509CRLHolder h) {
                try {
                    out.add(CRLS.getCRL(h));
                } catch (Exception e) {
                    throw new TlsConfigException(file + ": unusable CRL: " + e.getMessage(), e);
                }
            }
        }
        if (out.isEmpty()) throw new TlsConfigException(file + ": no PEM CRL in it");
        return out;
    }

    private static List<Object> objects(Path file) throws TlsConfigException {
        List<Object> out = new ArrayList<>();
        try (Reader r = Files.newBufferedReader(file, StandardCharsets.US_ASCII); PEMParser p = new PEMParser(r)) {
            for (Object o = p.readObject(); o != null; o = p.readObject()) out.add(o);
        } catch (NoSuchFileException e) {
            throw new TlsConfigException(file + ": no such file");
        } catch (IOException | RuntimeException e) {
            throw new TlsConfigException(file + ": cannot read it as PEM: " + oneLine(e), e);
        }
        return out;
    }

    static String oneLine(Throwable e) {
        String m = e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
        int nl = m.indexOf('\n');
        return nl < 0 ? m : m.substring(0, nl);
    }
}
