package io.jnbd.client;

import io.jnbd.protocol.Nbd;

import java.util.List;

/**
 * What the handshake learned about an export.
 *
 * @param name               the export name (as the server reported it, else as asked for)
 * @param description        the server's description, or empty
 * @param size               export size in bytes
 * @param transmissionFlags  the export's transmission flags ({@code NBD_FLAG_*})
 * @param minimumBlockSize   offsets and lengths are multiples of this (1 if the server set no constraint)
 * @param preferredBlockSize the size at which I/O is efficient
 * @param maximumPayload     the largest READ or WRITE payload the server accepts
 * @param structuredReplies  structured replies were negotiated
 * @param baseAllocation     the {@code base:allocation} meta context was negotiated (block status works)
 */
public record ExportInfo(String name, String description, long size, int transmissionFlags,
                         int minimumBlockSize, int preferredBlockSize, long maximumPayload,
                         boolean structuredReplies, boolean baseAllocation) {

    public boolean has(int flag) {
        return (transmissionFlags & flag) != 0;
    }

    public boolean readOnly() { return has(Nbd.FLAG_READ_ONLY); }
    public boolean canFlush() { return has(Nbd.FLAG_SEND_FLUSH); }
    public boolean canFua() { return has(Nbd.FLAG_SEND_FUA); }
    public boolean canTrim() { return has(Nbd.FLAG_SEND_TRIM); }
    public boolean canWriteZeroes() { return has(Nbd.FLAG_SEND_WRITE_ZEROES); }
    public boolean canFastZero() { return has(Nbd.FLAG_SEND_FAST_ZERO); }
    public boolean canCache() { return has(Nbd.FLAG_SEND_CACHE); }
    public boolean canMultiConn() { return has(Nbd.FLAG_CAN_MULTI_CONN); }

    /** The names of the set transmission flags, e.g. {@code [HAS_FLAGS, SEND_FLUSH]}. */
    public List<String> flagNames() {
        return Nbd.transmissionFlagNames(transmissionFlags);
    }
}
