package io.jnbd.server.net;

import static org.assertj.core.api.Assertions.assertThat;

import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.FileSystems;
import java.nio.file.Path;
import jdk.net.ExtendedSocketOptions;
import jdk.net.UnixDomainPrincipal;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Who is at the other end of a Unix socket, by both ways of asking, and the rule applied to it. */
class UnixPeerTest {
    @TempDir
    Path dir;

    @Test
    void bothWaysNameThisProcessAsTrusted() throws Exception {
        try (ServerSocketChannel server = ServerSocketChannel.open(StandardProtocolFamily.UNIX)) {
            server.bind(UnixDomainSocketAddress.of(dir.resolve("s")));
            try (SocketChannel client = SocketChannel.open(server.getLocalAddress()); SocketChannel accepted = server.accept()) {
                UnixPeer peer = UnixPeer.of(accepted);
                // SO_PEERCRED's number and struct ucred's layout held against the kernel: the pid is ours.
                assertThat(peer.pid()).isEqualTo(ProcessHandle.current().pid());
                assertThat(peer.uid()).isEqualTo(UnixPeer.selfUid()).isNotNegative();
                assertThat(peer.selfOrRoot()).isTrue();
                assertThat(peer.toString()).startsWith("uid " + peer.uid()).endsWith(" pid " + peer.pid());

                UnixPeer byJdk = UnixPeer.byPrincipal(accepted.getOption(ExtendedSocketOptions.SO_PEERCRED));
                assertThat(byJdk.selfOrRoot()).isTrue();
                assertThat(byJdk.user()).isEqualTo(peer.user());
                assertThat(byJdk.toString()).isEqualTo("user " + peer.user());
            }
        }
    }

    @Test
    void theRuleIsTheServersUserOrRoot() throws Exception {
        assertThat(UnixPeer.trusted(1000, 1000)).isTrue();
        assertThat(UnixPeer.trusted(0, 1000)).isTrue();
        assertThat(UnixPeer.trusted(65534, 1000)).isFalse();
        assertThat(UnixPeer.trusted(1000, 0)).isFalse();
        // Without native calls: another user's principal is refused, whatever its name looks like.
        var users = FileSystems.getDefault().getUserPrincipalLookupService();
        var nobody = new UnixDomainPrincipal(users.lookupPrincipalByName("nobody"), users.lookupPrincipalByGroupName("nogroup"));
        assertThat(UnixPeer.byPrincipal(nobody).selfOrRoot()).isEqualTo(UnixPeer.selfUid() == 65534);
    }
}
