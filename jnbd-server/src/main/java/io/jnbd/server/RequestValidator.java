package io.jnbd.server;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.Backend.Capability;
import io.jnbd.server.backend.BlockSizes;

/**
 * The one place a request is checked before any backend sees it. Returns 0 for a valid request or the
 * NBD error to reply with.
 */
final class RequestValidator {
    private static final int KNOWN_FLAGS = Nbd.CMD_FLAG_FUA | Nbd.CMD_FLAG_NO_HOLE | Nbd.CMD_FLAG_DF
        | Nbd.CMD_FLAG_REQ_ONE | Nbd.CMD_FLAG_FAST_ZERO;

    /** The most data one OFFSET_DATA chunk carries: its length field is 32 bits and counts the offset too. */
    private static final long MAX_CHUNK_DATA = 0xFFFF_FFFFL - 8;

    private final Session session;
    private final Backend backend;
    private final long size;
    private final BlockSizes blockSizes;

    RequestValidator(Session session) {
        this.session = session;
        this.backend = session.export().backend();
        this.size = backend.size();
        this.blockSizes = backend.blockSizes();
    }

    int check(Request r) {
        if ((r.flags() & ~KNOWN_FLAGS) != 0) return Nbd.EINVAL;
        int allowedFlags = switch (r.type()) {
            case Nbd.CMD_READ -> session.structuredReplies() ? Nbd.CMD_FLAG_DF : 0;
            case Nbd.CMD_WRITE, Nbd.CMD_TRIM -> Nbd.CMD_FLAG_FUA;
            case Nbd.CMD_WRITE_ZEROES -> Nbd.CMD_FLAG_FUA | Nbd.CMD_FLAG_NO_HOLE
                | (backend.can(Capability.FAST_ZERO) ? Nbd.CMD_FLAG_FAST_ZERO : 0);
            case Nbd.CMD_BLOCK_STATUS -> Nbd.CMD_FLAG_REQ_ONE;
            case Nbd.CMD_FLUSH, Nbd.CMD_CACHE, Nbd.CMD_DISC -> 0;
            default -> -1;
        };
        if (allowedFlags < 0) return Nbd.EINVAL; // unknown command
        // FUA is harmless on any command and some clients set it everywhere; other stray flags are errors.
        if ((r.flags() & ~(allowedFlags | Nbd.CMD_FLAG_FUA)) != 0) return Nbd.EINVAL;

        boolean writes = r.type() == Nbd.CMD_WRITE || r.type() == Nbd.CMD_TRIM || r.type() == Nbd.CMD_WRITE_ZEROES;
        if (writes && (session.readOnly() || !backend.can(Capability.WRITE))) return Nbd.EPERM;
        switch (r.type()) {
            case Nbd.CMD_TRIM -> { if (!backend.can(Capability.TRIM)) return Nbd.EINVAL; }
            case Nbd.CMD_WRITE_ZEROES -> { if (!backend.can(Capability.ZERO)) return Nbd.EINVAL; }
            case Nbd.CMD_FLUSH -> { return backend.can(Capability.FLUSH) ? 0 : Nbd.EINVAL; }
            case Nbd.CMD_DISC -> { return 0; }
            case Nbd.CMD_BLOCK_STATUS -> {
                if (!session.blockStatusAllowed()) return Nbd.EINVAL;
                if (r.length() == 0) return Nbd.EINVAL;
            }
            default -> { }
        }
        // The maximum binds only a client that agreed block sizes; for the others the spec asks for an effectively
        // unlimited one, and the request is streamed (Export.streamed). One structured chunk cannot carry more
        // than 2^32 - 9 bytes of data, so a read that must not be fragmented stays below that.
        if ((r.type() == Nbd.CMD_READ || r.type() == Nbd.CMD_WRITE) && session.blockSizeAgreed()
                && r.length() > blockSizes.maximum()) {
            return Nbd.EOVERFLOW;
        }
        if (r.type() == Nbd.CMD_READ && r.has(Nbd.CMD_FLAG_DF) && r.length() > MAX_CHUNK_DATA) return Nbd.EOVERFLOW;
        // Unsigned comparisons: an offset near 2^64 must not wrap around into range.
        if (Long.compareUnsigned(r.offset(), size) > 0 || r.length() > size - r.offset()) {
            return writes ? Nbd.ENOSPC : Nbd.EINVAL;
        }
        // Only a client that asked for the block sizes promised to keep to them (NBD spec, "Block size
        // constraints"); the others get the default minimum of 1, which every backend serves.
        int min = session.blockSizeAgreed() ? blockSizes.minimum() : 1;
        if (min > 1 && (r.offset() % min != 0 || r.length() % min != 0)) return Nbd.EINVAL;
        return 0;
    }

    /** The message that goes with an error {@link #check} returned. */
    static String message(Request r, int error) {
        return switch (error) {
            case Nbd.EPERM -> "export is read-only";
            case Nbd.ENOSPC -> "request runs past the end of the export";
            case Nbd.EOVERFLOW -> "request is larger than the maximum payload agreed";
            default -> "invalid request " + r;
        };
    }
}
