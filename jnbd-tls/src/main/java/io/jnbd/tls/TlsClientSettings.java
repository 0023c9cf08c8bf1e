package io.jnbd.tls;

import java.nio.file.Path;

/**
 * What a TLS client is given, in libnbd's terms ({@code nbds://} URIs and their query parameters).
 *
 * @param certificates directory holding {@code ca-cert.pem} and, for servers that verify clients,
 *                     {@code client-cert.pem} and {@code client-key.pem}; null: the JDK's default trust store
 * @param pskFile      psktool's {@code identity:hexkey} lines; when set, PSK is used instead of X.509
 * @param pskIdentity  the identity to use from {@code pskFile} (libnbd: the URI's user); null: the first line
 * @param verifyPeer   X.509: check the server's certificate chain and that it names {@code serverName}
 * @param serverName   the host name or address the client connected to
 */
public record TlsClientSettings(Path certificates, Path pskFile, String pskIdentity, boolean verifyPeer,
                                String serverName) {}
