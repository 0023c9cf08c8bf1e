package io.jnbd.server.io;

/** Linux errno values the server acts on, and the text the C library gives them. */
public final class Errno {
    private Errno() {}

    public static final int EPERM = 1;
    public static final int EINTR = 4;
    public static final int EIO = 5;
    public static final int ENXIO = 6;
    public static final int EAGAIN = 11;
    public static final int ENOMEM = 12;
    public static final int EACCES = 13;
    public static final int EFBIG = 27;
    public static final int ENOSPC = 28;
    public static final int EROFS = 30;
    public static final int EINVAL = 22;
    public static final int EOVERFLOW = 75;
    public static final int EOPNOTSUPP = 95;
    public static final int EDQUOT = 122;

    /** E.g. {@code "No space left on device (ENOSPC)"}, or {@code "errno 71"} for one not listed here. */
    public static String describe(int errno) {
        return switch (errno) {
            case EPERM -> "Operation not permitted (EPERM)";
            case EINTR -> "Interrupted system call (EINTR)";
            case EIO -> "Input/output error (EIO)";
            case ENXIO -> "No such device or address (ENXIO)";
            case EAGAIN -> "Resource temporarily unavailable (EAGAIN)";
            case ENOMEM -> "Cannot allocate memory (ENOMEM)";
            case EACCES -> "Permission denied (EACCES)";
            case EFBIG -> "File too large (EFBIG)";
            case ENOSPC -> "No space left on device (ENOSPC)";
            case EROFS -> "Read-only file system (EROFS)";
            case EINVAL -> "Invalid argument (EINVAL)";
            case EOVERFLOW -> "Value too large for defined data type (EOVERFLOW)";
            case EOPNOTSUPP -> "Operation not supported (EOPNOTSUPP)";
            case EDQUOT -> "Disk quota exceeded (EDQUOT)";
            default -> "errno " + errno;
        };
    }
}
