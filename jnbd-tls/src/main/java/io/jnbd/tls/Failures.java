package io.jnbd.tls;

import org.bouncycastle.tls.AlertDescription;
import org.bouncycastle.tls.TlsFatalAlert;
import org.bouncycastle.tls.TlsFatalAlertReceived;

import java.io.EOFException;
import javax.net.ssl.SSLException;

/** One line saying why a TLS session failed, out of the JDK's and BouncyCastle's exceptions. */
final class Failures {
    private static final String RECEIVED_ALERT = "Received fatal alert: ";

    private Failures() {}

    static String why(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof CheckedTrust.Refused r) return r.getMessage();
            if (t instanceof TlsFatalAlertReceived r) return "the peer sent alert " + AlertDescription.getName(r.getAlertDescription());
            if (t instanceof TlsFatalAlert a) {
                String name = AlertDescription.getName(a.getAlertDescription());
                String detail = detail(a);
                return detail == null ? name : detail + " (" + name + ")";
            }
        }
        String m = Pem.oneLine(e);
        if (e instanceof SSLException) {
            // JDK 25 puts the alert first: "(certificate_required) Received fatal alert: certificate_required".
            if (m.startsWith("(") && m.indexOf(") ") > 0) m = m.substring(m.indexOf(") ") + 2);
            if (m.startsWith(RECEIVED_ALERT)) return "the peer sent alert " + m.substring(RECEIVED_ALERT.length());
            if (m.contains("Empty client certificate chain")) return "the client sent no certificate (or none from a CA in ca-cert.pem), and verify-peer requires one";
            if (m.contains("No appropriate protocol") || m.contains("no cipher suites in common")) {
                return "no TLS version or cipher suite in common with the peer";
            }
            if (m.contains("Unsupported or unrecognized SSL message")) return "the peer is not speaking TLS";
        }
        if (e instanceof EOFException) return "the connection closed during the TLS handshake";
        return m;
    }

    /** What was said when the alert was raised, without the "handshake_failure(40); " BouncyCastle puts before it. */
    static String detail(TlsFatalAlert a) {
        String m = a.getMessage();
        String prefix = AlertDescription.getText(a.getAlertDescription());
        if (m == null || m.equals(prefix)) return null;
        return m.startsWith(prefix + "; ") ? m.substring(prefix.length() + 2) : m;
    }

    static TlsException handshake(Throwable e) {
        return e instanceof TlsException t ? t : new TlsException("TLS handshake failed: " + why(e), e);
    }

    static TlsException session(Throwable e) {
        return e instanceof TlsException t ? t : new TlsException("TLS session failed: " + why(e), e);
    }
}
