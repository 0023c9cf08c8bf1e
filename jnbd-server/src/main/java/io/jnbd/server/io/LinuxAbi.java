package io.jnbd.server.io;

import java.util.Optional;

import org.slf4j.LoggerFactory;

/**
 * The values of the Linux constants behind {@link NativeIo} and {@link NativeSocket} that are not the same on
 * every architecture, one row per architecture they were checked on. Elsewhere the native paths stay off
 * (with one log line) and the JDK's portable ones serve: a wrong flag is no error but another flag, as
 * x86-64's O_DIRECT (040000) is aarch64's O_DIRECTORY.
 *
 * <p>The two rows differ in O_DIRECT, O_DIRECTORY and the epoll_event layout (packed only on x86-64). The rest
 * is equal on both but not on every architecture: O_CLOEXEC (alpha, sparc, parisc), MAP_ANONYMOUS (mips, alpha,
 * parisc), SOL_SOCKET (0xffff on mips, sparc, alpha, parisc), SO_RCVLOWAT (16 on powerpc, other values where
 * SOL_SOCKET differs), SO_PEERCRED (21 on powerpc, others where SOL_SOCKET differs) and FIONREAD (mips, powerpc,
 * sparc, alpha). What the native classes keep to themselves is
 * the same on every Linux architecture: O_RDONLY, O_RDWR, FALLOC_FL_*, SEEK_*, POSIX_FADV_WILLNEED, RWF_NOWAIT,
 * PROT_*, MAP_PRIVATE, MSG_DONTWAIT, MSG_MORE, MSG_NOSIGNAL, POLLIN, POLLOUT, the EPOLL* events and
 * EPOLL_CTL_*; MADV_HUGEPAGE and the errno values differ only on architectures this table refuses. The
 * structures (iovec, msghdr) assume LP64, which both rows are.
 *
 * @param oDirect          open(2)'s O_DIRECT
 * @param oDirectory       open(2)'s O_DIRECTORY: not used, but the check that O_DIRECT was not taken for it
 * @param oCloexec         open(2)'s O_CLOEXEC, also epoll_create1's EPOLL_CLOEXEC
 * @param mapAnonymous     mmap(2)'s MAP_ANONYMOUS
 * @param solSocket        setsockopt(2)'s SOL_SOCKET
 * @param soRcvlowat       SO_RCVLOWAT
 * @param soPeercred       SO_PEERCRED
 * @param fionread         ioctl(2)'s FIONREAD
 * @param packedEpollEvent struct epoll_event has no padding before its 64-bit data (12 bytes, not 16)
 */
public record LinuxAbi(String arch, int oDirect, int oDirectory, int oCloexec, int mapAnonymous, int solSocket,
                       int soRcvlowat, int soPeercred, long fionread, boolean packedEpollEvent) {

    static final LinuxAbi X86_64 = new LinuxAbi("x86-64", 040000, 0200000, 02000000, 0x20, 1, 18, 17, 0x541B, true);
    static final LinuxAbi AARCH64 = new LinuxAbi("aarch64", 0200000, 040000, 02000000, 0x20, 1, 18, 17, 0x541B, false);

    /** This JVM's row, or null where native calls are off: not Linux, or an architecture not in the table. */
    public static final LinuxAbi CURRENT = current();

    /** The row for a value of the {@code os.arch} property. */
    public static Optional<LinuxAbi> of(String osArch) {
        return switch (osArch) {
            case "amd64", "x86_64" -> Optional.of(X86_64);
            case "aarch64" -> Optional.of(AARCH64);
            default -> Optional.empty();
        };
    }

    private static LinuxAbi current() {
        if (!System.getProperty("os.name", "").toLowerCase().contains("linux")) return null;
        String arch = System.getProperty("os.arch", "");
        Optional<LinuxAbi> abi = of(arch);
        if (abi.isEmpty()) {
            LoggerFactory.getLogger(LinuxAbi.class).warn("native calls off: no table of Linux constants for os.arch '{}'"
                + " (known: amd64, x86_64, aarch64); the JDK's portable I/O serves instead", arch);
        }
        return abi.orElse(null);
    }
}
