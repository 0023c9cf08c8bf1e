package io.jnbd.tls;

import org.bouncycastle.tls.ProtocolVersion;

/** The TLS versions a context offers: 1.3 and 1.2 in production; tests narrow them to force one. */
enum Versions {
    TLS13_AND_12(new String[] {"TLSv1.3", "TLSv1.2"}, ProtocolVersion.TLSv13.downTo(ProtocolVersion.TLSv12)),
    TLS13(new String[] {"TLSv1.3"}, ProtocolVersion.TLSv13.only()),
    TLS12(new String[] {"TLSv1.2"}, ProtocolVersion.TLSv12.only());

    final String[] jdk;
    final ProtocolVersion[] bc;

    Versions(String[] jdk, ProtocolVersion[] bc) {
        this.jdk = jdk;
        this.bc = bc;
    }

    boolean tls13() {
        return this != TLS12;
    }
}
