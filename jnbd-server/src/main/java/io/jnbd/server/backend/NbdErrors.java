package io.jnbd.server.backend;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.io.Errno;
import io.jnbd.server.io.NativeIo;
import java.nio.channels.ClosedByInterruptException;
import java.nio.file.AccessDeniedException;
import java.nio.file.ReadOnlyFileSystemException;

/**
 * The one place where a failure becomes the NBD error a client sees. The cause decides: clients act on the
 * difference (QEMU can pause a guest on ENOSPC and resume it once space is freed, where EIO means a broken
 * disk), so nothing that names a cause may be flattened to EIO.
 */
public final class NbdErrors {
    private NbdErrors() {}

    /** The NBD error for anything a backend call (or the wait for one) threw. */
    public static int of(Throwable t) {
        if (t instanceof NbdErrorException e) return e.error();
        if (t instanceof NativeIo.ErrnoException e) return ofErrno(e.errno());
        if (t instanceof InterruptedException || t instanceof ClosedByInterruptException) return Nbd.ESHUTDOWN;
        if (t instanceof OutOfMemoryError) return Nbd.ENOMEM;
        if (t instanceof AccessDeniedException || t instanceof ReadOnlyFileSystemException) return Nbd.EPERM;
        return t.getMessage() != null ? ofMessage(t.getMessage()) : Nbd.EIO;
    }

    /** The NBD error for a Linux errno, as the NBD spec asks (EDQUOT and EFBIG are a full disk too). */
    public static int ofErrno(int errno) {
        return switch (errno) {
            case Errno.ENOSPC, Errno.EDQUOT, Errno.EFBIG -> Nbd.ENOSPC;
            case Errno.EROFS, Errno.EPERM, Errno.EACCES -> Nbd.EPERM;
            case Errno.EINVAL -> Nbd.EINVAL;
            case Errno.EOVERFLOW -> Nbd.EOVERFLOW;
            case Errno.EOPNOTSUPP -> Nbd.ENOTSUP;
            case Errno.ENOMEM -> Nbd.ENOMEM;
            default -> Nbd.EIO;
        };
    }

    /**
     * The JDK's own file calls (FileChannel's force, and its reads and writes where native calls are not
     * available) report a failed system call only by the C library's text for its errno. The English texts
     * are matched; in another locale they fall through to EIO.
     */
    static int ofMessage(String message) {
        if (message.contains("No space left on device") || message.contains("Disk quota exceeded")
                || message.contains("File too large")) return Nbd.ENOSPC;
        if (message.contains("Read-only file system") || message.contains("Operation not permitted")
                || message.contains("Permission denied")) return Nbd.EPERM;
        if (message.contains("Value too large")) return Nbd.EOVERFLOW;
        if (message.contains("Operation not supported")) return Nbd.ENOTSUP;
        if (message.contains("Invalid argument")) return Nbd.EINVAL;
        if (message.contains("Cannot allocate memory")) return Nbd.ENOMEM;
        return Nbd.EIO;
    }
}
