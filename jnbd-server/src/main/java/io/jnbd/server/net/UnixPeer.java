package io.jnbd.server.net;

import io.jnbd.server.io.NativeSocket;
import java.io.IOException;
import java.nio.channels.SocketChannel;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.UserPrincipal;
import jdk.net.ExtendedSocketOptions;
import jdk.net.UnixDomainPrincipal;

/**
 * The process at the other end of a Unix-domain socket, from the kernel's record of it (SO_PEERCRED), and whether
 * it runs as this process's user or as root: the only users that may drive a server's control endpoint, and the
 * only ones a control client believes to be its server.
 *
 * <p>The ids come from {@link NativeSocket#peerCredentials} where native calls are on. Elsewhere the JDK's own
 * SO_PEERCRED gives the peer's user as a principal, compared by uid with the owner of {@code /proc/self} (this
 * process's effective user) and with root; uid and pid are then unknown (-1).
 *
 * @param user       the peer's user name, or its uid when the system has no name for it
 * @param uid        its user id, -1 when unknown
 * @param pid        its process id, -1 when unknown
 * @param selfOrRoot it runs as this process's effective user or as root
 */
public record UnixPeer(String user, long uid, long pid, boolean selfOrRoot) {

    /** The peer of {@code channel}, a connected Unix-domain socket. */
    public static UnixPeer of(SocketChannel channel) throws IOException {
        UnixDomainPrincipal p = channel.getOption(ExtendedSocketOptions.SO_PEERCRED);
        int fd = NativeSocket.AVAILABLE ? NativeSocket.fd(channel) : -1;
        if (fd < 0) return byPrincipal(p);
        NativeSocket.PeerCredentials c = NativeSocket.peerCredentials(fd);
        return new UnixPeer(p.user().getName(), c.uid(), c.pid(), trusted(c.uid(), NativeSocket.effectiveUid()));
    }

    /** Without native calls: the JDK's principal, compared with this process's user and root. */
    static UnixPeer byPrincipal(UnixDomainPrincipal p) throws IOException {
        UserPrincipal self = Files.getOwner(Path.of("/proc/self"));
        UserPrincipal root = FileSystems.getDefault().getUserPrincipalLookupService().lookupPrincipalByName("root");
        // UnixUserPrincipals compare by uid: a name the system maps two ways cannot pass for another user.
        return new UnixPeer(p.user().getName(), -1, -1, p.user().equals(self) || p.user().equals(root));
    }

    /** The rule itself: the server's own user, or root, who can read its memory and files anyway. */
    static boolean trusted(long peerUid, long selfUid) {
        return peerUid == 0 || peerUid == selfUid;
    }

    /** This process's effective user id, -1 where native calls are off. */
    public static long selfUid() {
        return NativeSocket.AVAILABLE ? NativeSocket.effectiveUid() : -1;
    }

    /** For log lines: {@code uid 1000 (alice) pid 4242}, or {@code user alice} when the ids are unknown. */
    @Override
    public String toString() {
        if (uid < 0) return "user " + user;
        return "uid " + uid + (user.equals(Long.toString(uid)) ? "" : " (" + user + ")") + (pid > 0 ? " pid " + pid : "");
    }
}
