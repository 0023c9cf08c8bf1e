package io.jnbd.tls;

import org.bouncycastle.asn1.x500.RDN;
import org.bouncycastle.asn1.x500.X500Name;
import org.bouncycastle.asn1.x500.style.BCStyle;
import org.bouncycastle.asn1.x500.style.IETFUtils;

import java.security.cert.CertificateParsingException;
import java.security.cert.X509Certificate;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;

/** The names a certificate gives its holder, as log lines and peer identities show them. */
final class Names {
    private static final int SAN_DNS = 2;
    private static final int SAN_IP = 7;

    private Names() {}

    /** Subject CN first, then DNS and IP subject alternative names, without repeats. */
    static List<String> of(X509Certificate c) {
        List<String> names = new ArrayList<>();
        cn(c).ifPresent(names::add);
        try {
            Collection<List<?>> sans = c.getSubjectAlternativeNames();
            if (sans != null) {
                for (List<?> san : sans) {
                    int type = (Integer) san.get(0);
                    if ((type == SAN_DNS || type == SAN_IP) && san.get(1) instanceof String s && !names.contains(s)) {
                        names.add(s);
                    }
                }
            }
        } catch (CertificateParsingException e) {
            // A certificate with unparsable SANs is still named by its CN.
        }
        return names;
    }

    static java.util.Optional<String> cn(X509Certificate c) {
        RDN[] cns = X500Name.getInstance(c.getSubjectX500Principal().getEncoded()).getRDNs(BCStyle.CN);
        return cns.length == 0 ? java.util.Optional.empty()
            : java.util.Optional.of(IETFUtils.valueToString(cns[0].getFirst().getValue()));
    }

    /** "'CN=x'" or the whole subject when it has no CN, for messages. */
    static String quoted(X509Certificate c) {
        return "'" + cn(c).map(n -> "CN=" + n).orElse(c.getSubjectX500Principal().getName()) + "'";
    }
}
