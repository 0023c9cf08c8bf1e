package io.jnbd.client;

import org.junit.jupiter.api.Test;

import java.net.InetSocketAddress;
import java.net.UnixDomainSocketAddress;

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
        assertThatThrownBy(() -> NbdUri.parse("nbds://x/y")).hasMessageContaining("TLS");
        assertThatThrownBy(() -> NbdUri.parse("nbd:///y")).hasMessageContaining("no host");
        assertThatThrownBy(() -> NbdUri.parse("nbd://bad host/")).hasMessageContaining("not a valid URI");
    }
}
