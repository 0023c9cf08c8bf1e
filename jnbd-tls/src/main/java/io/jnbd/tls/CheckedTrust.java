package io.jnbd.tls;

import java.net.Socket;
import java.security.cert.CertPathValidatorException;
import java.security.cert.CertificateException;
import java.security.cert.CertificateExpiredException;
import java.security.cert.CertificateNotYetValidException;
import java.security.cert.PKIXReason;
import java.security.cert.X509Certificate;
import java.util.Date;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.X509ExtendedTrustManager;

/**
 * The JDK's PKIX trust manager, with each refusal turned into one line that says which certificate and why
 * (expired, not yet valid, not from our CA, revoked, another host's): the JDK's own words are a stack of
 * class names.
 */
final class CheckedTrust extends X509ExtendedTrustManager {

    /** A certificate refused, with the line to log; found again in the cause chain of the handshake's failure. */
    static final class Refused extends CertificateException {
        Refused(String message, Throwable cause) {
            super(message, cause);
        }
    }

    private final X509ExtendedTrustManager pkix;
    private final String trustSource;

    /** {@code trustSource} names where the CAs come from, for messages: "ca-cert.pem", "the JDK's trust store". */
    CheckedTrust(X509ExtendedTrustManager pkix, String trustSource) {
        this.pkix = pkix;
        this.trustSource = trustSource;
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine) throws CertificateException {
        checkChain(chain, "client", () -> pkix.checkClientTrusted(chain, authType, engine));
    }

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine) throws CertificateException {
        // The chain alone first, so that a failure of the second call can only be the host name.
        checkChain(chain, "server", () -> pkix.checkServerTrusted(chain, authType));
        try {
            pkix.checkServerTrusted(chain, authType, engine);
        } catch (CertificateException e) {
            throw new Refused("server certificate names " + String.join(", ", Names.of(chain[0])) + ", not '"
                + engine.getPeerHost() + "'", e);
        }
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType, Socket socket) throws CertificateException {
        checkChain(chain, "client", () -> pkix.checkClientTrusted(chain, authType, socket));
    }

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType, Socket socket) throws CertificateException {
        checkChain(chain, "server", () -> pkix.checkServerTrusted(chain, authType, socket));
    }

    @Override
    public void checkClientTrusted(X509Certificate[] chain, String authType) throws CertificateException {
        checkChain(chain, "client", () -> pkix.checkClientTrusted(chain, authType));
    }

    @Override
    public void checkServerTrusted(X509Certificate[] chain, String authType) throws CertificateException {
        checkChain(chain, "server", () -> pkix.checkServerTrusted(chain, authType));
    }

    @Override
    public X509Certificate[] getAcceptedIssuers() {
        return pkix.getAcceptedIssuers();
    }

    private interface Check {
        void run() throws CertificateException;
    }

    private void checkChain(X509Certificate[] chain, String whose, Check pkixCheck) throws CertificateException {
        if (chain == null || chain.length == 0) throw new Refused(whose + " sent no certificate", null);
        X509Certificate leaf = chain[0];
        String who = whose + " certificate " + Names.quoted(leaf);
        try {
            leaf.checkValidity();
        } catch (CertificateExpiredException e) {
            throw new Refused(who + " expired on " + leaf.getNotAfter().toInstant(), e);
        } catch (CertificateNotYetValidException e) {
            throw new Refused(who + " is not valid before " + leaf.getNotBefore().toInstant(), e);
        }
        try {
            pkixCheck.run();
        } catch (CertificateException e) {
            throw new Refused(who + " " + reason(e, leaf), e);
        }
    }

    private String reason(CertificateException e, X509Certificate leaf) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof CertPathValidatorException v) {
                if (v.getReason() == CertPathValidatorException.BasicReason.REVOKED) return "is revoked (ca-crl.pem)";
                if (v.getReason() == CertPathValidatorException.BasicReason.UNDETERMINED_REVOCATION_STATUS) {
                    return "has no revocation status: ca-crl.pem is not from its CA or is out of date";
                }
                if (v.getReason() == CertPathValidatorException.BasicReason.EXPIRED) {
                    return "chains to a certificate that is out of its validity period (" + new Date() + ")";
                }
                if (v.getReason() == PKIXReason.NO_TRUST_ANCHOR) break;
            }
        }
        return "(issuer '" + leaf.getIssuerX500Principal().getName() + "') is not signed by a CA in " + trustSource;
    }
}
