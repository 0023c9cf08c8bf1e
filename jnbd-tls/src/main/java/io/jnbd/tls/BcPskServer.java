package io.jnbd.tls;

import org.bouncycastle.tls.AlertDescription;
import org.bouncycastle.tls.BasicTlsPSKExternal;
import org.bouncycastle.tls.PSKTlsServer;
import org.bouncycastle.tls.ProtocolVersion;
import org.bouncycastle.tls.PskIdentity;
import org.bouncycastle.tls.TlsCredentials;
import org.bouncycastle.tls.TlsFatalAlert;
import org.bouncycastle.tls.TlsFatalAlertReceived;
import org.bouncycastle.tls.TlsPSKExternal;
import org.bouncycastle.tls.TlsPSKIdentityManager;
import org.bouncycastle.tls.TlsServerProtocol;
import org.bouncycastle.tls.crypto.TlsCrypto;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.Vector;

/** The PSK half of a server: BouncyCastle's TLS with the keys of a psktool file (TLS 1.3 psk_dhe_ke, TLS 1.2 PSK suites). */
final class BcPskServer {
    private final PskFile keys;
    private final Versions versions;
    private final TlsCrypto crypto = PskSuites.crypto();

    private BcPskServer(PskFile keys, Versions versions) {
        this.keys = keys;
        this.versions = versions;
    }

    static BcPskServer load(Path file, Versions versions) throws TlsConfigException {
        return new BcPskServer(PskFile.load(file), versions);
    }

    PskFile keys() {
        return keys;
    }

    SecureChannel accept(RawChannel raw, ByteBuffer received) throws TlsException {
        Peer peer = new Peer(new Identities());
        TlsServerProtocol protocol = new TlsServerProtocol();
        try {
            protocol.accept(peer);
        } catch (IOException e) {
            throw new TlsException("TLS handshake failed: " + peer.explain(e), e);
        }
        BcSecureChannel c = BcSecureChannel.handshake(protocol, raw, true, received, peer::explain);
        c.established(peer.description, List.of(peer.identities.offered));
        return c;
    }

    String describe() {
        int n = keys.keys().size();
        return "PSK (" + n + (n == 1 ? " identity)" : " identities)");
    }

    /** TLS 1.2 looks the key up here; remembers which identity the client named, for the messages. */
    private final class Identities implements TlsPSKIdentityManager {
        String offered;
        boolean known;

        @Override
        public byte[] getHint() {
            return null;
        }

        @Override
        public byte[] getPSK(byte[] identity) {
            offered = new String(identity, StandardCharsets.UTF_8);
            byte[] key = keys.key(offered);
            known = key != null;
            return key == null ? null : key.clone();
        }
    }

    private final class Peer extends PSKTlsServer {
        final Identities identities;
        String description = "";

        Peer(Identities identities) {
            super(crypto, identities);
            this.identities = identities;
        }

        @Override
        protected ProtocolVersion[] getSupportedVersions() {
            return versions.bc;
        }

        @Override
        protected int[] getSupportedCipherSuites() {
            return PskSuites.offered(getCrypto(), versions);
        }

        /** Our order (ECDHE before DHE, AES-GCM before ChaCha20), not the client's: GnuTLS lists DHE-PSK with AES-256 early. */
        @Override
        protected boolean preferLocalCipherSuites() {
            return true;
        }

        @Override
        public TlsPSKExternal getExternalPSK(Vector identityList) {
            for (Object o : identityList) {
                byte[] id = ((PskIdentity) o).getIdentity();
                String name = new String(id, StandardCharsets.UTF_8);
                if (identities.offered == null) identities.offered = name;
                byte[] key = keys.key(name);
                if (key != null) {
                    identities.offered = name;
                    identities.known = true;
                    return new BasicTlsPSKExternal(id, getCrypto().createSecret(key.clone()), PskSuites.PRF);
                }
            }
            return null;
        }

        @Override
        public TlsCredentials getCredentials() throws IOException {
            // Asked for in TLS 1.3 only when no PSK was chosen: there is no certificate to fall back on.
            if (context.getServerVersion().isEqualOrLaterVersionOf(ProtocolVersion.TLSv13)) {
                throw new TlsFatalAlert(AlertDescription.unknown_psk_identity);
            }
            return super.getCredentials();
        }

        @Override
        public void notifyHandshakeComplete() throws IOException {
            super.notifyHandshakeComplete();
            description = BcPskClient.describe(context.getSecurityParametersConnection());
        }

        String explain(Throwable e) {
            String who = identities.offered;
            if (e instanceof TlsFatalAlert a && !(e instanceof TlsFatalAlertReceived)) {
                short d = a.getAlertDescription();
                if (d == AlertDescription.unknown_psk_identity) {
                    return who == null ? "the client offered no PSK identity (an X.509 client?)" : "unknown PSK identity '" + who + "'";
                }
                if (identities.known && (d == AlertDescription.decrypt_error || d == AlertDescription.bad_record_mac)) {
                    return "PSK handshake failed: bad key for '" + who + "'";
                }
            }
            String why = Failures.why(e);
            return who == null ? why : why + " (PSK identity '" + who + "')";
        }
    }
}
