package io.jnbd.client;

import org.junit.jupiter.api.Test;

import io.jnbd.tls.TlsClientSettings;

import java.net.InetSocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class NbdUriTest {

    @Test
    void tcpWithAndWithoutPort() {
        NbdUri u = NbdUri.parse("nbd://example.org:1234/disk");
        assertThat(((InetSocketAddress) u.address()).getPort()).isEqualTo(1234);
        assertThat(((InetSocketAddress) u.address()).getHostString()).isEqualTo("example.org");
        assertThat(u.exportName()).isEqualTo("disk");
        NbdUri d = NbdUri.parse("nbd://localhost");
        assertThat(((InetSocketAddress) d.address()).getPort()).isEqualTo(10809);
        assertThat(d.exportName()).isEmpty();
        assertThat(((InetSocketAddress) NbdUri.parse("nbd://[::1]:99/x").address()).getAddress().isLoopbackAddress()).isTrue();
    }

    @Test
    void unixSocket() {
        NbdUri u = NbdUri.parse("nbd+unix:///my%20disk?socket=/tmp/nbd.sock");
        assertThat(u.address()).isEqualTo(UnixDomainSocketAddress.of("/tmp/nbd.sock"));
        assertThat(u.exportName()).isEqualTo("my disk");
    }

    @Test
    void badUrisSayWhy() {
        assertThatThrownBy(() -> NbdUri.parse("http://x/y")).hasMessageContaining("unsupported URI scheme 'http'");
        assertThatThrownBy(() -> NbdUri.parse("nbd+unix:///x")).hasMessageContaining("socket=PATH");
        assertThatThrownBy(() -> NbdUri.parse("nbd:///y")).hasMessageContaining("no host");
        assertThatThrownBy(() -> NbdUri.parse("nbd://bad host/")).hasMessageContaining("not a valid URI");
    }

    @Test
    void plainUrisAskForNoTls() {
        assertThat(NbdUri.parse("nbd://h/x").tls()).isNull();
        assertThat(NbdUri.parse("nbd+tcp://h/x").tls()).isNull();
        assertThat(NbdUri.parse("nbd+unix:///x?socket=/s").tls()).isNull();
        // A user on a plain URI means nothing (libnbd too ignores it without TLS).
        assertThat(NbdUri.parse("nbd://alice@h/x").tls()).isNull();
    }

    @Test
    void nbdsDefaultsToX509CheckingTheHost() {
        NbdUri u = NbdUri.parse("nbds://example.org:1234/disk");
        assertThat(((InetSocketAddress) u.address()).getPort()).isEqualTo(1234);
        assertThat(u.exportName()).isEqualTo("disk");
        assertThat(u.tls()).isEqualTo(new TlsClientSettings(null, null, null, true, "example.org"));
        assertThat(NbdUri.parse("nbds://example.org").address()).isEqualTo(new InetSocketAddress("example.org", 10809));
        assertThat(NbdUri.parse("nbds+tcp://h/x").tls().serverName()).isEqualTo("h");
        assertThat(NbdUri.parse("nbds://[::1]/x").tls().serverName()).isEqualTo("::1");
        assertThat(NbdUri.parse("NBDS://h/x").tls()).isNotNull();
    }

    @Test
    void nbdsQueryParameters() {
        NbdUri u = NbdUri.parse("nbds://h/x?tls-certificates=/etc/pki/my%20certs&tls-verify-peer=false&tls-hostname=server.example");
        assertThat(u.tls()).isEqualTo(new TlsClientSettings(Path.of("/etc/pki/my certs"), null, null, false, "server.example"));
        for (String off : new String[]{"0", "false", "no", "off", "FALSE"}) {
            assertThat(NbdUri.parse("nbds://h/?tls-verify-peer=" + off).tls().verifyPeer()).as(off).isFalse();
        }
        for (String on : new String[]{"1", "true", "yes", "on"}) {
            assertThat(NbdUri.parse("nbds://h/?tls-verify-peer=" + on).tls().verifyPeer()).as(on).isTrue();
        }
        // An encoded '&' stays inside its value; the last of repeated parameters counts, as in libnbd.
        assertThat(NbdUri.parse("nbds://h/?tls-psk-file=/k%26eys&tls-psk-file=/keys.psk").tls().pskFile())
            .isEqualTo(Path.of("/keys.psk"));
        assertThat(NbdUri.parse("nbds://h/?tls-psk-file=/k%26eys").tls().pskFile()).isEqualTo(Path.of("/k&eys"));
        assertThat(NbdUri.parse("nbds://h/?tls-type=x509&tls-certificates=/c").tls().certificates()).isEqualTo(Path.of("/c"));
        assertThat(NbdUri.parse("nbds://h/?tls-type=psk&tls-psk-file=/k").tls().pskFile()).isEqualTo(Path.of("/k"));
    }

    @Test
    void userIsThePskIdentity() {
        NbdUri u = NbdUri.parse("nbds://alice@h:10810/disk?tls-psk-file=/keys.psk");
        assertThat(u.tls()).isEqualTo(new TlsClientSettings(null, Path.of("/keys.psk"), "alice", true, "h"));
        assertThat(NbdUri.parse("nbds://bob%40corp@h/?tls-psk-file=/k").tls().pskIdentity()).isEqualTo("bob@corp");
        // libnbd's own example: a user and no host on a Unix socket URI.
        NbdUri unix = NbdUri.parse("nbds+unix://alice@/?socket=/tmp/nbd.sock&tls-psk-file=/k");
        assertThat(unix.address()).isEqualTo(UnixDomainSocketAddress.of("/tmp/nbd.sock"));
        assertThat(unix.tls().pskIdentity()).isEqualTo("alice");
    }

    @Test
    void nbdsUnixVerifiesTheServerOnlyWithATlsHostname() {
        // As libnbd: a Unix socket has no host name to check the certificate against, so it is not verified...
        NbdUri u = NbdUri.parse("nbds+unix:///disk?socket=/tmp/nbd.sock&tls-certificates=/c");
        assertThat(u.address()).isEqualTo(UnixDomainSocketAddress.of("/tmp/nbd.sock"));
        assertThat(u.exportName()).isEqualTo("disk");
        assertThat(u.tls()).isEqualTo(new TlsClientSettings(Path.of("/c"), null, null, false, null));
        // ...unless tls-hostname names what to check.
        assertThat(NbdUri.parse("nbds+unix:///?socket=/s&tls-hostname=nbd.example").tls())
            .isEqualTo(new TlsClientSettings(null, null, null, true, "nbd.example"));
        assertThatThrownBy(() -> NbdUri.parse("nbds+unix:///?socket=/s&tls-verify-peer=true"))
            .hasMessageContaining("tls-verify-peer=true needs tls-hostname=NAME");
        assertThatThrownBy(() -> NbdUri.parse("nbds+unix:///x")).hasMessageContaining("socket=PATH");
    }

    @Test
    void withExportKeepsTheServerAndTls() {
        NbdUri u = NbdUri.parse("nbds://h/pool?tls-certificates=/c").withExport("pool/status");
        assertThat(u.exportName()).isEqualTo("pool/status");
        assertThat(u.tls().certificates()).isEqualTo(Path.of("/c"));
        assertThat(u.address()).isEqualTo(new InetSocketAddress("h", 10809));
    }

    @Test
    void badTlsParametersSayWhy() {
        assertThatThrownBy(() -> NbdUri.parse("nbd://h/x?tls-certificates=/c"))
            .hasMessageContaining("tls-certificates needs a TLS URI (nbds://");
        assertThatThrownBy(() -> NbdUri.parse("nbd+unix:///x?socket=/s&tls-psk-file=/k"))
            .hasMessageContaining("tls-psk-file needs a TLS URI");
        assertThatThrownBy(() -> NbdUri.parse("nbds://h/x?tls-certificate=/c"))
            .hasMessageContaining("unknown TLS parameter 'tls-certificate'").hasMessageContaining("tls-certificates");
        assertThatThrownBy(() -> NbdUri.parse("nbds://h/x?tls-verify-peer=maybe"))
            .hasMessageContaining("tls-verify-peer must be true or false");
        assertThatThrownBy(() -> NbdUri.parse("nbds://h/x?tls-certificates=")).hasMessageContaining("tls-certificates is empty");
        assertThatThrownBy(() -> NbdUri.parse("nbds://h/x?tls-hostname=")).hasMessageContaining("empty tls-hostname");
        assertThatThrownBy(() -> NbdUri.parse("nbds://h/x?tls-type=anon")).hasMessageContaining("anonymous TLS");
        assertThatThrownBy(() -> NbdUri.parse("nbds://h/x?tls-type=psk")).hasMessageContaining("tls-psk-file");
        assertThatThrownBy(() -> NbdUri.parse("nbds://h/x?tls-type=x509&tls-psk-file=/k")).hasMessageContaining("x509");
        assertThatThrownBy(() -> NbdUri.parse("nbds:///x")).hasMessageContaining("no host");
        assertThatThrownBy(() -> NbdUri.parse("nbdx://h/x")).hasMessageContaining("nbds://");
    }

    @Test
    void optionsTlsFillsWhatTheUriLeavesOpen() {
        var base = new TlsClientSettings(Path.of("/opt/certs"), null, null, true, "configured.example");
        ClientOptions opts = ClientOptions.defaults().withTls(base);
        assertThat(ClientOptions.defaults().tlsFor(NbdUri.parse("nbd://h/x"))).isNull();
        // A plain URI gets TLS from the options, checked against the options' name or else the URI's host.
        assertThat(opts.tlsFor(NbdUri.parse("nbd://h/x"))).isEqualTo(base);
        assertThat(ClientOptions.defaults().withTls(new TlsClientSettings(null, null, null, true, null))
            .tlsFor(NbdUri.parse("nbd://h/x")).serverName()).isEqualTo("h");
        // An nbds URI's own parameters come first; either side can turn verification off.
        assertThat(opts.tlsFor(NbdUri.parse("nbds://h/x")))
            .isEqualTo(new TlsClientSettings(Path.of("/opt/certs"), null, null, true, "h"));
        assertThat(opts.tlsFor(NbdUri.parse("nbds://h/x?tls-certificates=/c&tls-verify-peer=false")))
            .isEqualTo(new TlsClientSettings(Path.of("/c"), null, null, false, "h"));
        assertThat(opts.tlsFor(NbdUri.parse("nbd+unix:///x?socket=/s")).serverName()).isEqualTo("configured.example");
        // The older constructor and every with... method keep the TLS settings.
        assertThat(opts.withConnections(2).withCache(1 << 20, 0).tls()).isEqualTo(base);
        assertThat(new ClientOptions(1, 1, java.time.Duration.ofSeconds(1), java.time.Duration.ZERO, true, 0, 0, 4096, null).tls()).isNull();
    }
}
