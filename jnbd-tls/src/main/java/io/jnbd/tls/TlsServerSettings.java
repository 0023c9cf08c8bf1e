package io.jnbd.tls;

import java.nio.file.Path;

/**
 * What a TLS server is given, in nbdkit's terms.
 *
 * @param certificates directory holding {@code ca-cert.pem}, {@code server-cert.pem}, {@code server-key.pem}
 *                     and optionally {@code ca-crl.pem} (the layout nbdkit and QEMU read); null for PSK only
 * @param pskFile      psktool's {@code identity:hexkey} lines; null for X.509 only
 * @param verifyPeer   X.509: require a client certificate signed by {@code ca-cert.pem}
 */
public record TlsServerSettings(Path certificates, Path pskFile, boolean verifyPeer) {
    public TlsServerSettings {
        if (certificates == null && pskFile == null) {
            throw new IllegalArgumentException("TLS needs certificates or a PSK file");
        }
    }
}
