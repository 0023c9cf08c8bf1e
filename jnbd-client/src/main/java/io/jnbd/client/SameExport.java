package io.jnbd.client;

import io.jnbd.protocol.Nbd;

import java.util.List;

/**
 * What a reconnecting lane's first connection found, held against each connection that replaces it: a server that
 * comes back with another export behind the same name must not get the requests meant for the first.
 *
 * @param info     the export as the handshake described it
 * @param contexts the negotiated metadata contexts, by name
 * @param identity the server's {@code jnbd:identity:<hex>} of the export's data, or null if it named none
 */
record SameExport(ExportInfo info, List<String> contexts, String identity) {

    /** Transmission flags whose loss would change what requests mean or whether they may be sent. */
    private static final int CAPABILITIES = Nbd.FLAG_SEND_FLUSH | Nbd.FLAG_SEND_FUA | Nbd.FLAG_SEND_TRIM
        | Nbd.FLAG_SEND_WRITE_ZEROES | Nbd.FLAG_SEND_FAST_ZERO | Nbd.FLAG_SEND_CACHE | Nbd.FLAG_CAN_MULTI_CONN;

    SameExport(Connection first) {
        this(first.info(), first.metaContexts(), first.identity());
    }

    /**
     * How {@code c}'s export differs in a way that matters, for a message ("size 2097152, was 1048576"), or null if
     * it is the same as far as can be told. A server that named an identity and now names none (or another) is
     * another export; one that never named any is judged by size and flags alone. Capabilities the server adds are
     * no difference: this client does not use them.
     */
    String difference(Connection c) {
        ExportInfo now = c.info();
        if (now.size() != info.size()) return "size " + now.size() + ", was " + info.size();
        if (identity != null && !identity.equals(c.identity())) {
            return (c.identity() == null ? "no identity" : c.identity()) + ", was " + identity;
        }
        if (now.readOnly() != info.readOnly()) return now.readOnly() ? "read-only, was writable" : "writable, was read-only";
        int gone = info.transmissionFlags() & ~now.transmissionFlags() & CAPABILITIES;
        if (gone != 0) return "without " + String.join(", ", Nbd.transmissionFlagNames(gone)) + ", which it offered before";
        if (now.structuredReplies() != info.structuredReplies()) {
            return "structured replies " + onOff(now.structuredReplies()) + ", were " + onOff(info.structuredReplies());
        }
        if (now.minimumBlockSize() > info.minimumBlockSize() || now.maximumPayload() < info.maximumPayload()) {
            return "block sizes " + now.minimumBlockSize() + ".." + now.maximumPayload() + ", were "
                + info.minimumBlockSize() + ".." + info.maximumPayload();
        }
        if (!c.metaContexts().equals(contexts)) return "metadata contexts " + c.metaContexts() + ", were " + contexts;
        return null;
    }

    private static String onOff(boolean on) {
        return on ? "on" : "off";
    }
}
