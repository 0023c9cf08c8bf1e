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

    /**
     * The engine's enabled suites with the AES-128-GCM ones first, for a side whose order counts. AES-128 runs
     * 10 rounds to AES-256's 14: the JDK's GCM measured 1726 against 1613 MB/s on 16 KiB records (this machine,
     * 23 Nov), and under TLS the cipher is most of a large read's CPU. Both are far beyond any feasible attack.
     */
    static String[] aes128First(String[] enabled) {
        java.util.List<String> first = new java.util.ArrayList<>(), rest = new java.util.ArrayList<>();
        for (String s : enabled) (s.contains("_AES_128_GCM_") ? first : rest).add(s);
        first.addAll(rest);
        return first.toArray(String[]::new);
    }
}
