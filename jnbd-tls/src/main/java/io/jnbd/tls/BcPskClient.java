package io.jnbd.tls;

import org.bouncycastle.tls.AlertDescription;
import org.bouncycastle.tls.BasicTlsPSKExternal;
import org.bouncycastle.tls.BasicTlsPSKIdentity;
import org.bouncycastle.tls.CipherSuite;
import org.bouncycastle.tls.PSKTlsClient;
import org.bouncycastle.tls.ProtocolVersion;
import org.bouncycastle.tls.SecurityParameters;
import org.bouncycastle.tls.TlsAuthentication;
import org.bouncycastle.tls.TlsClientProtocol;
import org.bouncycastle.tls.TlsCredentials;
import org.bouncycastle.tls.TlsFatalAlert;
import org.bouncycastle.tls.TlsFatalAlertReceived;
import org.bouncycastle.tls.TlsPSK;
import org.bouncycastle.tls.TlsServerCertificate;
import org.bouncycastle.tls.CertificateRequest;
import org.bouncycastle.tls.crypto.TlsCrypto;

import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Vector;

/** The PSK half of a client: BouncyCastle's TLS with one identity of a psktool file. */
final class BcPskClient {
    private final String identity;
    private final byte[] key;
    private final Versions versions;
    private final TlsCrypto crypto = PskSuites.crypto();

    private BcPskClient(String identity, byte[] key, Versions versions) {
        this.identity = identity;
        this.key = key;
        this.versions = versions;
    }

    /** The key of {@code identity} in {@code keys}, or of its first line when {@code identity} is null. */
    static BcPskClient load(PskFile keys, String identity, Versions versions) throws TlsConfigException {
        if (identity == null) return new BcPskClient(keys.first().getKey(), keys.first().getValue(), versions);
        byte[] key = keys.key(identity);
        if (key == null) throw new TlsConfigException(keys.path() + ": no key for PSK identity '" + identity + "'");
        return new BcPskClient(identity, key, versions);
    }

    SecureChannel connect(RawChannel raw) throws TlsException {
        Peer peer = new Peer();
        TlsClientProtocol protocol = new TlsClientProtocol();
        try {
            protocol.connect(peer);
        } catch (IOException e) {
            throw new TlsException("TLS handshake failed: " + peer.explain(e), e);
        }
        BcSecureChannel c = BcSecureChannel.handshake(protocol, raw, false, null, peer::explain);
        c.established(peer.description, List.of(identity));
        return c;
    }

    private final class Peer extends PSKTlsClient {
        String description = "";

        Peer() {
            super(crypto, new BasicTlsPSKIdentity(identity, key.clone()));
        }

        @Override
        protected ProtocolVersion[] getSupportedVersions() {
            return versions.bc;
        }

        @Override
        protected int[] getSupportedCipherSuites() {
            return PskSuites.offered(getCrypto(), versions);
        }

        @Override
        public Vector getExternalPSKs() {
            if (!versions.tls13()) return null;
            Vector<Object> v = new Vector<>();
            v.add(new BasicTlsPSKExternal(identity.getBytes(StandardCharsets.UTF_8), getCrypto().createSecret(key.clone()), PskSuites.PRF));
            return v;
        }

        @Override
        public void notifySelectedPSK(TlsPSK selected) throws IOException {
            if (selected == null) {
                throw new TlsFatalAlert(AlertDescription.handshake_failure, "the server did not accept PSK identity '" + identity + "'");
            }
        }

        @Override
        public TlsAuthentication getAuthentication() {
            return new TlsAuthentication() {
                @Override
                public void notifyServerCertificate(TlsServerCertificate serverCertificate) throws IOException {
                    throw new TlsFatalAlert(AlertDescription.handshake_failure,
                        "the server answered with a certificate instead of accepting PSK identity '" + identity + "'");
                }

                @Override
                public TlsCredentials getClientCredentials(CertificateRequest certificateRequest) {
                    return null;
                }
            };
        }

        @Override
        public void notifyHandshakeComplete() throws IOException {
            super.notifyHandshakeComplete();
            description = describe(context.getSecurityParametersConnection());
        }

        String explain(Throwable e) {
            // GnuTLS servers (nbdkit, qemu-nbd) hang up without an alert on an unknown identity or a wrong key.
            if (e instanceof TlsException t && t.getMessage().startsWith("the connection closed before")) {
                return "PSK handshake failed: the server closed the connection on our ClientHello"
                    + " (does it know PSK identity '" + identity + "', with this key?)";
            }
            if (e instanceof TlsException t && t.getMessage().endsWith("the connection closed during the handshake")) {
                return "PSK handshake failed: the server closed the connection during the handshake"
                    + " (is its key for '" + identity + "' another?)";
            }
            if (e instanceof TlsFatalAlertReceived r) {
                short d = r.getAlertDescription();
                if (d == AlertDescription.unknown_psk_identity) return "the server does not know PSK identity '" + identity + "'";
                if (d == AlertDescription.decrypt_error || d == AlertDescription.bad_record_mac) {
                    return "PSK handshake failed: the server refused the key of '" + identity + "' (" + AlertDescription.getText(d) + ")";
                }
            } else if (e instanceof TlsFatalAlert a) {
                if (a.getAlertDescription() == AlertDescription.bad_record_mac) {
                    return "PSK handshake failed: the server's key for '" + identity + "' differs (bad_record_mac)";
                }
                // Raised here, with a line of our own (a server that chose no PSK, or sent a certificate).
                if (Failures.detail(a) != null && Failures.detail(a).contains(identity)) return Failures.detail(a);
            }
            return Failures.why(e);
        }
    }

    private static final Map<Integer, String> SUITE_NAMES = suiteNames();

    /** "TLSv1.3 TLS_AES_128_GCM_SHA256", as the JDK names them. */
    static String describe(SecurityParameters p) {
        ProtocolVersion v = p.getNegotiatedVersion();
        String version = v.equals(ProtocolVersion.TLSv13) ? "TLSv1.3" : v.equals(ProtocolVersion.TLSv12) ? "TLSv1.2" : v.getName();
        int suite = p.getCipherSuite();
        return version + " " + SUITE_NAMES.getOrDefault(suite, String.format("0x%04x", suite));
    }

    private static Map<Integer, String> suiteNames() {
        Map<Integer, String> names = new HashMap<>();
        for (Field f : CipherSuite.class.getFields()) {
            if (f.getType() == int.class && Modifier.isStatic(f.getModifiers())) {
                try {
                    names.putIfAbsent(f.getInt(null), f.getName());
                } catch (IllegalAccessException ignored) {
                    // public constants; cannot happen
                }
            }
        }
        return names;
    }
}
