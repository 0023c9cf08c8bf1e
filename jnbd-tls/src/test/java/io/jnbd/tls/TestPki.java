package io.jnbd.tls;

import org.bouncycastle.asn1.pkcs.PrivateKeyInfo;
import org.bouncycastle.asn1.sec.ECPrivateKey;
import org.bouncycastle.asn1.x509.AlgorithmIdentifier;
import org.bouncycastle.asn1.x9.X9ObjectIdentifiers;
import org.bouncycastle.asn1.x500.X500Name;
import org.bouncycastle.asn1.x509.SubjectPublicKeyInfo;
import org.bouncycastle.util.io.pem.PemObject;
import org.bouncycastle.asn1.x509.BasicConstraints;
import org.bouncycastle.asn1.x509.CRLReason;
import org.bouncycastle.asn1.x509.ExtendedKeyUsage;
import org.bouncycastle.asn1.x509.Extension;
import org.bouncycastle.asn1.x509.GeneralName;
import org.bouncycastle.asn1.x509.GeneralNames;
import org.bouncycastle.asn1.x509.KeyPurposeId;
import org.bouncycastle.asn1.x509.KeyUsage;
import org.bouncycastle.cert.X509v3CertificateBuilder;
import org.bouncycastle.cert.jcajce.JcaX509CRLConverter;
import org.bouncycastle.cert.jcajce.JcaX509CertificateConverter;
import org.bouncycastle.cert.jcajce.JcaX509ExtensionUtils;
import org.bouncycastle.cert.jcajce.JcaX509v2CRLBuilder;
import org.bouncycastle.cert.jcajce.JcaX509v3CertificateBuilder;
import org.bouncycastle.openssl.jcajce.JcaPEMWriter;
import org.bouncycastle.openssl.jcajce.JcaPKCS8Generator;
import org.bouncycastle.operator.ContentSigner;
import org.bouncycastle.operator.jcajce.JcaContentSignerBuilder;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.cert.X509Certificate;
import java.security.spec.ECGenParameterSpec;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Date;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A throwaway PKI for tests, made with BouncyCastle's builders (no certtool, no openssl): a CA and the
 * certificates it signs, written in nbdkit's layout ({@code ca-cert.pem}, {@code server-cert.pem},
 * {@code server-key.pem}) plus libnbd's client files ({@code client-cert.pem}, {@code client-key.pem}); also
 * psktool key files. Shared with other modules' tests through this module's test jar.
 *
 * <pre>
 *   TestPki.create(dir);                                   // CA, server "localhost", client "client"
 *   TestPki ca = TestPki.newCa("test CA");
 *   ca.writeAll(dir, "server.example", "alice");
 *   ca.writeServer(other, "localhost", Validity.EXPIRED, KeyFormat.PKCS8);
 *   TestPki.writePsk(dir.resolve("keys.psk"), "alice", "bob");
 * </pre>
 */
public final class TestPki {
    public static final String CA_CERT = "ca-cert.pem";
    public static final String CA_CRL = "ca-crl.pem";
    public static final String SERVER_CERT = "server-cert.pem";
    public static final String SERVER_KEY = "server-key.pem";
    public static final String CLIENT_CERT = "client-cert.pem";
    public static final String CLIENT_KEY = "client-key.pem";

    public enum Validity { CURRENT, EXPIRED, NOT_YET_VALID }

    /** How the private key is written: PKCS#8 or SEC1 for EC P-256, PKCS#1 for RSA 2048 (as certtool and openssl do). */
    public enum KeyFormat { PKCS8, SEC1_EC, PKCS1_RSA }

    private static final SecureRandom RANDOM = new SecureRandom();
    private static final AtomicLong SERIALS = new AtomicLong(System.currentTimeMillis());

    private final KeyPair caKeys;
    private final X509Certificate caCert;
    private final X500Name caName;
    private final List<BigInteger> revoked = new ArrayList<>();
    private BigInteger lastClientSerial;

    private TestPki(KeyPair caKeys, X509Certificate caCert, X500Name caName) {
        this.caKeys = caKeys;
        this.caCert = caCert;
        this.caName = caName;
    }

    /** A new CA, whose certificates are written into {@code dir} for a server "localhost" and a client "client". */
    public static TestPki create(Path dir) {
        TestPki pki = newCa("jnbd test CA");
        pki.writeAll(dir, "localhost", "client");
        return pki;
    }

    /** A new CA, unrelated to every other. */
    public static TestPki newCa(String cn) {
        try {
            KeyPair keys = keyPair(KeyFormat.PKCS8);
            X500Name name = new X500Name("CN=" + cn);
            Instant now = Instant.now();
            X509v3CertificateBuilder b = new JcaX509v3CertificateBuilder(name, serial(), Date.from(now.minus(Duration.ofHours(1))),
                Date.from(now.plus(Duration.ofDays(30))), name, keys.getPublic());
            JcaX509ExtensionUtils ext = new JcaX509ExtensionUtils();
            b.addExtension(Extension.basicConstraints, true, new BasicConstraints(true));
            b.addExtension(Extension.keyUsage, true, new KeyUsage(KeyUsage.keyCertSign | KeyUsage.cRLSign));
            b.addExtension(Extension.subjectKeyIdentifier, false, ext.createSubjectKeyIdentifier(keys.getPublic()));
            X509Certificate cert = new JcaX509CertificateConverter().getCertificate(b.build(signer(keys.getPrivate())));
            return new TestPki(keys, cert, name);
        } catch (Exception e) {
            throw new IllegalStateException("cannot make a test CA", e);
        }
    }

    public X509Certificate caCertificate() {
        return caCert;
    }

    /** ca-cert.pem, a current server certificate (CN {@code serverCn}) and a current client certificate (CN {@code clientCn}). */
    public Path writeAll(Path dir, String serverCn, String clientCn) {
        writeCa(dir);
        writeServer(dir, serverCn, Validity.CURRENT, KeyFormat.PKCS8);
        writeClient(dir, clientCn, Validity.CURRENT, KeyFormat.PKCS8);
        return dir;
    }

    public Path writeCa(Path dir) {
        return writePem(dir.resolve(CA_CERT), caCert);
    }

    /** server-cert.pem and server-key.pem: CN {@code cn}, subject alternative names DNS localhost and IP 127.0.0.1. */
    public Path writeServer(Path dir, String cn, Validity validity, KeyFormat format) {
        issue(dir.resolve(SERVER_CERT), dir.resolve(SERVER_KEY), cn, validity, format, KeyPurposeId.id_kp_serverAuth,
            new GeneralNames(new GeneralName[] {new GeneralName(GeneralName.dNSName, "localhost"),
                new GeneralName(GeneralName.iPAddress, "127.0.0.1")}));
        return dir;
    }

    /** client-cert.pem and client-key.pem with CN {@code cn}. */
    public Path writeClient(Path dir, String cn, Validity validity, KeyFormat format) {
        lastClientSerial = issue(dir.resolve(CLIENT_CERT), dir.resolve(CLIENT_KEY), cn, validity, format,
            KeyPurposeId.id_kp_clientAuth, null);
        return dir;
    }

    /** ca-crl.pem revoking the client certificate written last (nbdkit reads it beside ca-cert.pem). */
    public Path writeCrlRevokingLastClient(Path dir) {
        revoked.add(lastClientSerial);
        try {
            Instant now = Instant.now();
            JcaX509v2CRLBuilder b = new JcaX509v2CRLBuilder(caCert, Date.from(now.minus(Duration.ofMinutes(5))));
            b.setNextUpdate(Date.from(now.plus(Duration.ofDays(7))));
            for (BigInteger s : revoked) b.addCRLEntry(s, Date.from(now.minus(Duration.ofMinutes(5))), CRLReason.keyCompromise);
            return writePem(dir.resolve(CA_CRL), new JcaX509CRLConverter().getCRL(b.build(signer(caKeys.getPrivate()))));
        } catch (Exception e) {
            throw new IllegalStateException("cannot make a CRL", e);
        }
    }

    /** A psktool file with a random 32-byte key for each identity; the keys, in order. */
    public static Map<String, byte[]> writePsk(Path file, String... identities) {
        Map<String, byte[]> keys = new LinkedHashMap<>();
        for (String id : identities) {
            byte[] key = new byte[32];
            RANDOM.nextBytes(key);
            keys.put(id, key);
        }
        writePsk(file, keys);
        return keys;
    }

    public static void writePsk(Path file, Map<String, byte[]> keys) {
        StringBuilder s = new StringBuilder();
        keys.forEach((id, key) -> s.append(id).append(':').append(HexFormat.of().formatHex(key)).append('\n'));
        try {
            Files.writeString(file, s.toString(), StandardCharsets.US_ASCII);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private BigInteger issue(Path certFile, Path keyFile, String cn, Validity validity, KeyFormat format,
                             KeyPurposeId purpose, GeneralNames sans) {
        try {
            KeyPair keys = keyPair(format);
            Instant now = Instant.now();
            Instant from = switch (validity) {
                case CURRENT -> now.minus(Duration.ofHours(1));
                case EXPIRED -> now.minus(Duration.ofDays(2));
                case NOT_YET_VALID -> now.plus(Duration.ofDays(1));
            };
            Instant to = validity == Validity.EXPIRED ? now.minus(Duration.ofDays(1)) : from.plus(Duration.ofDays(20));
            BigInteger serial = serial();
            X509v3CertificateBuilder b = new JcaX509v3CertificateBuilder(caName, serial, Date.from(from), Date.from(to),
                new X500Name("CN=" + cn), keys.getPublic());
            JcaX509ExtensionUtils ext = new JcaX509ExtensionUtils();
            b.addExtension(Extension.basicConstraints, true, new BasicConstraints(false));
            int usage = KeyUsage.digitalSignature | (format == KeyFormat.PKCS1_RSA ? KeyUsage.keyEncipherment : 0);
            b.addExtension(Extension.keyUsage, true, new KeyUsage(usage));
            b.addExtension(Extension.extendedKeyUsage, false, new ExtendedKeyUsage(purpose));
            b.addExtension(Extension.authorityKeyIdentifier, false, ext.createAuthorityKeyIdentifier(caCert));
            b.addExtension(Extension.subjectKeyIdentifier, false, ext.createSubjectKeyIdentifier(keys.getPublic()));
            if (sans != null) b.addExtension(Extension.subjectAlternativeName, false, sans);
            X509Certificate cert = new JcaX509CertificateConverter().getCertificate(b.build(signer(caKeys.getPrivate())));
            writePem(certFile, cert);
            switch (format) {
                case PKCS8 -> writePem(keyFile, pkcs8(keys));
                case PKCS1_RSA -> writePem(keyFile, keys.getPrivate()); // BouncyCastle writes an RSA key as PKCS#1
                case SEC1_EC -> writePem(keyFile, sec1(keys));
            }
            return serial;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (Exception e) {
            throw new IllegalStateException("cannot issue a test certificate", e);
        }
    }

    /**
     * PKCS#8 as openssl writes it. For EC the JDK's own encoding leaves the public key out of the inner RFC 5915
     * structure, and GnuTLS 3.7 refuses such a file ("ASN1 parser: Element was not found"), so put it in.
     */
    private static PemObject pkcs8(KeyPair keys) throws IOException {
        if (!(keys.getPrivate() instanceof java.security.interfaces.ECPrivateKey ec)) {
            return new JcaPKCS8Generator(keys.getPrivate(), null).generate();
        }
        SubjectPublicKeyInfo spki = SubjectPublicKeyInfo.getInstance(keys.getPublic().getEncoded());
        PrivateKeyInfo info = new PrivateKeyInfo(
            new AlgorithmIdentifier(X9ObjectIdentifiers.id_ecPublicKey, spki.getAlgorithm().getParameters()),
            new ECPrivateKey(256, ec.getS(), spki.getPublicKeyData(), null));
        return new PemObject("PRIVATE KEY", info.getEncoded());
    }

    /** RFC 5915 with the curve and public key in it, as openssl and certtool write it (the JDK's inner encoding has neither). */
    private static PemObject sec1(KeyPair keys) throws IOException {
        SubjectPublicKeyInfo spki = SubjectPublicKeyInfo.getInstance(keys.getPublic().getEncoded());
        BigInteger d = ((java.security.interfaces.ECPrivateKey) keys.getPrivate()).getS();
        return new PemObject("EC PRIVATE KEY",
            new ECPrivateKey(256, d, spki.getPublicKeyData(), spki.getAlgorithm().getParameters()).getEncoded());
    }

    private static KeyPair keyPair(KeyFormat format) throws Exception {
        if (format == KeyFormat.PKCS1_RSA) {
            KeyPairGenerator g = KeyPairGenerator.getInstance("RSA");
            g.initialize(2048, RANDOM);
            return g.generateKeyPair();
        }
        KeyPairGenerator g = KeyPairGenerator.getInstance("EC");
        g.initialize(new ECGenParameterSpec("secp256r1"), RANDOM);
        return g.generateKeyPair();
    }

    private static ContentSigner signer(PrivateKey key) throws Exception {
        return new JcaContentSignerBuilder("SHA256withECDSA").build(key);
    }

    private static BigInteger serial() {
        return BigInteger.valueOf(SERIALS.incrementAndGet());
    }

    private static Path writePem(Path file, Object o) {
        try (Writer w = Files.newBufferedWriter(file, StandardCharsets.US_ASCII); JcaPEMWriter pem = new JcaPEMWriter(w)) {
            pem.writeObject(o);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return file;
    }
}
