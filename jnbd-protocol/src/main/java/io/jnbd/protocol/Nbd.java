package io.jnbd.protocol;

/**
 * Numbers of the NBD protocol, named as in the NBD specification ({@code doc/proto.md}).
 * Grouped by the field they appear in, so a reader can hold this class against the spec.
 */
public final class Nbd {
    private Nbd() {}

    public static final int DEFAULT_PORT = 10809;

    // Handshake magic numbers.
    public static final long NBDMAGIC = 0x4e42444d41474943L;
    public static final long IHAVEOPT = 0x49484156454F5054L;
    public static final long OPTION_REPLY_MAGIC = 0x3e889045565a9L;

    // Handshake flags (server, 16 bits) and client flags (32 bits).
    public static final int FLAG_FIXED_NEWSTYLE = 1;
    public static final int FLAG_NO_ZEROES = 1 << 1;
    public static final int FLAG_C_FIXED_NEWSTYLE = 1;
    public static final int FLAG_C_NO_ZEROES = 1 << 1;

    // Transmission flags (16 bits).
    public static final int FLAG_HAS_FLAGS = 1;
    public static final int FLAG_READ_ONLY = 1 << 1;
    public static final int FLAG_SEND_FLUSH = 1 << 2;
    public static final int FLAG_SEND_FUA = 1 << 3;
    public static final int FLAG_ROTATIONAL = 1 << 4;
    public static final int FLAG_SEND_TRIM = 1 << 5;
    public static final int FLAG_SEND_WRITE_ZEROES = 1 << 6;
    public static final int FLAG_SEND_DF = 1 << 7;
    public static final int FLAG_CAN_MULTI_CONN = 1 << 8;
    public static final int FLAG_SEND_RESIZE = 1 << 9;
    public static final int FLAG_SEND_CACHE = 1 << 10;
    public static final int FLAG_SEND_FAST_ZERO = 1 << 11;

    // Option types.
    public static final int OPT_EXPORT_NAME = 1;
    public static final int OPT_ABORT = 2;
    public static final int OPT_LIST = 3;
    public static final int OPT_PEEK_EXPORT = 4;
    public static final int OPT_STARTTLS = 5;
    public static final int OPT_INFO = 6;
    public static final int OPT_GO = 7;
    public static final int OPT_STRUCTURED_REPLY = 8;
    public static final int OPT_LIST_META_CONTEXT = 9;
    public static final int OPT_SET_META_CONTEXT = 10;
    public static final int OPT_EXTENDED_HEADERS = 11;

    // Option reply types.
    public static final int REP_ACK = 1;
    public static final int REP_SERVER = 2;
    public static final int REP_INFO = 3;
    public static final int REP_META_CONTEXT = 4;
    public static final int REP_FLAG_ERROR = 1 << 31;
    public static final int REP_ERR_UNSUP = REP_FLAG_ERROR | 1;
    public static final int REP_ERR_POLICY = REP_FLAG_ERROR | 2;
    public static final int REP_ERR_INVALID = REP_FLAG_ERROR | 3;
    public static final int REP_ERR_PLATFORM = REP_FLAG_ERROR | 4;
    public static final int REP_ERR_TLS_REQD = REP_FLAG_ERROR | 5;
    public static final int REP_ERR_UNKNOWN = REP_FLAG_ERROR | 6;
    public static final int REP_ERR_SHUTDOWN = REP_FLAG_ERROR | 7;
    public static final int REP_ERR_BLOCK_SIZE_REQD = REP_FLAG_ERROR | 8;
    public static final int REP_ERR_TOO_BIG = REP_FLAG_ERROR | 9;

    // Info types (NBD_REP_INFO payloads and NBD_OPT_INFO/GO requests).
    public static final int INFO_EXPORT = 0;
    public static final int INFO_NAME = 1;
    public static final int INFO_DESCRIPTION = 2;
    public static final int INFO_BLOCK_SIZE = 3;

    // Transmission phase magic numbers.
    public static final int REQUEST_MAGIC = 0x25609513;
    public static final int SIMPLE_REPLY_MAGIC = 0x67446698;
    public static final int STRUCTURED_REPLY_MAGIC = 0x668e33ef;

    // Command flags (16 bits).
    public static final int CMD_FLAG_FUA = 1;
    public static final int CMD_FLAG_NO_HOLE = 1 << 1;
    public static final int CMD_FLAG_DF = 1 << 2;
    public static final int CMD_FLAG_REQ_ONE = 1 << 3;
    public static final int CMD_FLAG_FAST_ZERO = 1 << 4;

    // Request types.
    public static final int CMD_READ = 0;
    public static final int CMD_WRITE = 1;
    public static final int CMD_DISC = 2;
    public static final int CMD_FLUSH = 3;
    public static final int CMD_TRIM = 4;
    public static final int CMD_CACHE = 5;
    public static final int CMD_WRITE_ZEROES = 6;
    public static final int CMD_BLOCK_STATUS = 7;

    // Structured reply flags and types.
    public static final int REPLY_FLAG_DONE = 1;
    public static final int REPLY_TYPE_NONE = 0;
    public static final int REPLY_TYPE_OFFSET_DATA = 1;
    public static final int REPLY_TYPE_OFFSET_HOLE = 2;
    public static final int REPLY_TYPE_BLOCK_STATUS = 5;
    public static final int REPLY_TYPE_ERROR = (1 << 15) + 1;
    public static final int REPLY_TYPE_ERROR_OFFSET = (1 << 15) + 2;

    // Error values.
    public static final int EPERM = 1;
    public static final int EIO = 5;
    public static final int ENOMEM = 12;
    public static final int EINVAL = 22;
    public static final int ENOSPC = 28;
    public static final int EOVERFLOW = 75;
    public static final int ENOTSUP = 95;
    public static final int ESHUTDOWN = 108;

    // base:allocation status flags.
    public static final String CONTEXT_BASE_ALLOCATION = "base:allocation";
    public static final int STATE_HOLE = 1;
    public static final int STATE_ZERO = 2;

    /** Sizes of fixed headers on the wire. */
    public static final int REQUEST_SIZE = 28;
    public static final int SIMPLE_REPLY_SIZE = 16;
    public static final int STRUCTURED_REPLY_SIZE = 20;
    public static final int OPTION_HEADER_SIZE = 16;
    public static final int OPTION_REPLY_HEADER_SIZE = 20;

    /** Default maximum payload the spec says every server should accept (2^25). */
    public static final int DEFAULT_MAX_PAYLOAD = 1 << 25;

    public static String commandName(int type) {
        return switch (type) {
            case CMD_READ -> "READ";
            case CMD_WRITE -> "WRITE";
            case CMD_DISC -> "DISC";
            case CMD_FLUSH -> "FLUSH";
            case CMD_TRIM -> "TRIM";
            case CMD_CACHE -> "CACHE";
            case CMD_WRITE_ZEROES -> "WRITE_ZEROES";
            case CMD_BLOCK_STATUS -> "BLOCK_STATUS";
            default -> "CMD_" + type;
        };
    }

    public static String optionName(int option) {
        return switch (option) {
            case OPT_EXPORT_NAME -> "EXPORT_NAME";
            case OPT_ABORT -> "ABORT";
            case OPT_LIST -> "LIST";
            case OPT_PEEK_EXPORT -> "PEEK_EXPORT";
            case OPT_STARTTLS -> "STARTTLS";
            case OPT_INFO -> "INFO";
            case OPT_GO -> "GO";
            case OPT_STRUCTURED_REPLY -> "STRUCTURED_REPLY";
            case OPT_LIST_META_CONTEXT -> "LIST_META_CONTEXT";
            case OPT_SET_META_CONTEXT -> "SET_META_CONTEXT";
            case OPT_EXTENDED_HEADERS -> "EXTENDED_HEADERS";
            default -> "OPT_" + Integer.toUnsignedString(option);
        };
    }

    public static String replyTypeName(int type) {
        return switch (type) {
            case REP_ACK -> "ACK";
            case REP_SERVER -> "SERVER";
            case REP_INFO -> "INFO";
            case REP_META_CONTEXT -> "META_CONTEXT";
            case REP_ERR_UNSUP -> "ERR_UNSUP";
            case REP_ERR_POLICY -> "ERR_POLICY";
            case REP_ERR_INVALID -> "ERR_INVALID";
            case REP_ERR_PLATFORM -> "ERR_PLATFORM";
            case REP_ERR_TLS_REQD -> "ERR_TLS_REQD";
            case REP_ERR_UNKNOWN -> "ERR_UNKNOWN";
            case REP_ERR_SHUTDOWN -> "ERR_SHUTDOWN";
            case REP_ERR_BLOCK_SIZE_REQD -> "ERR_BLOCK_SIZE_REQD";
            case REP_ERR_TOO_BIG -> "ERR_TOO_BIG";
            default -> "REP_" + Integer.toUnsignedString(type);
        };
    }

    public static String errorName(int error) {
        return switch (error) {
            case 0 -> "OK";
            case EPERM -> "EPERM";
            case EIO -> "EIO";
            case ENOMEM -> "ENOMEM";
            case EINVAL -> "EINVAL";
            case ENOSPC -> "ENOSPC";
            case EOVERFLOW -> "EOVERFLOW";
            case ENOTSUP -> "ENOTSUP";
            case ESHUTDOWN -> "ESHUTDOWN";
            default -> "error " + Integer.toUnsignedString(error);
        };
    }

    /** Names of the set transmission flags, for logs and {@code jnbd info}. */
    public static java.util.List<String> transmissionFlagNames(int flags) {
        String[] names = {"HAS_FLAGS", "READ_ONLY", "SEND_FLUSH", "SEND_FUA", "ROTATIONAL", "SEND_TRIM",
            "SEND_WRITE_ZEROES", "SEND_DF", "CAN_MULTI_CONN", "SEND_RESIZE", "SEND_CACHE", "SEND_FAST_ZERO"};
        var out = new java.util.ArrayList<String>();
        for (int i = 0; i < names.length; i++) {
            if ((flags & (1 << i)) != 0) out.add(names[i]);
        }
        return out;
    }
}
