package io.jnbd.tls;

import java.nio.file.Path;

/** Each engine at each TLS version, over a directory holding TestPki's files and keys.psk (alice first, then bob). */
enum Setup {
    X509_TLS13(false, Versions.TLS13),
    X509_TLS12(false, Versions.TLS12),
    PSK_TLS13(true, Versions.TLS13),
    PSK_TLS12(true, Versions.TLS12);

    static final String PSK_FILE = "keys.psk";

    final boolean psk;
    final Versions versions;

    Setup(boolean psk, Versions versions) {
        this.psk = psk;
        this.versions = versions;
    }

    static Path prepare(Path dir) {
        TestPki.create(dir);
        TestPki.writePsk(dir.resolve(PSK_FILE), "alice", "bob");
        return dir;
    }

    TlsServer server(Path dir) throws TlsConfigException {
        return ServerContext.load(psk ? new TlsServerSettings(null, dir.resolve(PSK_FILE), false)
            : new TlsServerSettings(dir, null, false), versions);
    }

    TlsClient client(Path dir) throws TlsConfigException {
        return ClientContext.load(psk ? new TlsClientSettings(null, dir.resolve(PSK_FILE), null, true, "localhost")
            : new TlsClientSettings(dir, null, null, true, "localhost"), versions);
    }

    String protocol() {
        return versions == Versions.TLS12 ? "TLSv1.2" : "TLSv1.3";
    }
}
