package io.jnbd.tls;

import org.bouncycastle.tls.CipherSuite;
import org.bouncycastle.tls.PRFAlgorithm;
import org.bouncycastle.tls.TlsUtils;
import org.bouncycastle.tls.crypto.TlsCrypto;
import org.bouncycastle.tls.crypto.impl.jcajce.JcaTlsCryptoProvider;

import java.security.SecureRandom;
import java.util.Arrays;
import java.util.stream.IntStream;

/** What BouncyCastle offers for PSK sessions, shared by its server and client. */
final class PskSuites {
    /**
     * TLS 1.3 external PSKs are bound to SHA-256 (RFC 8446 4.2.11 makes SHA-256 the default for a PSK with no
     * hash of its own, and GnuTLS uses it), and BouncyCastle's server picks the suite without regard to the
     * PSK's hash: offer only the SHA-256 suites, so that the two always agree.
     */
    static final int PRF = PRFAlgorithm.tls13_hkdf_sha256;
    private static final int[] TLS13 = {CipherSuite.TLS_AES_128_GCM_SHA256, CipherSuite.TLS_CHACHA20_POLY1305_SHA256};
    /** TLS 1.2, forward-secret ones first; AES-GCM before ChaCha20 (AES has the JDK's intrinsics), no SHA-1 MACs. */
    private static final int[] TLS12 = {
        CipherSuite.TLS_ECDHE_PSK_WITH_AES_128_GCM_SHA256,
        CipherSuite.TLS_ECDHE_PSK_WITH_CHACHA20_POLY1305_SHA256,
        CipherSuite.TLS_ECDHE_PSK_WITH_AES_256_CBC_SHA384,
        CipherSuite.TLS_ECDHE_PSK_WITH_AES_128_CBC_SHA256,
        CipherSuite.TLS_DHE_PSK_WITH_AES_256_GCM_SHA384,
        CipherSuite.TLS_DHE_PSK_WITH_AES_128_GCM_SHA256,
        CipherSuite.TLS_DHE_PSK_WITH_CHACHA20_POLY1305_SHA256,
        CipherSuite.TLS_DHE_PSK_WITH_AES_256_CBC_SHA384,
        CipherSuite.TLS_DHE_PSK_WITH_AES_128_CBC_SHA256,
        CipherSuite.TLS_PSK_WITH_AES_256_GCM_SHA384,
        CipherSuite.TLS_PSK_WITH_AES_128_GCM_SHA256,
        CipherSuite.TLS_PSK_WITH_CHACHA20_POLY1305_SHA256,
        CipherSuite.TLS_PSK_WITH_AES_256_CBC_SHA384,
        CipherSuite.TLS_PSK_WITH_AES_128_CBC_SHA256,
    };

    private PskSuites() {}

    /** BouncyCastle's protocol over the JDK's ciphers, so that AES-GCM runs on the JDK's intrinsics. */
    static TlsCrypto crypto() {
        return new JcaTlsCryptoProvider().create(new SecureRandom());
    }

    static int[] offered(TlsCrypto crypto, Versions versions) {
        int[] all = versions == Versions.TLS12 ? TLS12
            : versions == Versions.TLS13 ? TLS13 : IntStream.concat(Arrays.stream(TLS13), Arrays.stream(TLS12)).toArray();
        return TlsUtils.getSupportedCipherSuites(crypto, all);
    }

    /** True if {@code suite} is one of the TLS 1.2 PSK suites: a ClientHello offering one comes from a PSK client. */
    static boolean isTls12Psk(int suite) {
        for (int s : TLS12) if (s == suite) return true;
        return false;
    }
}
