package io.jnbd.server;

import java.util.List;

/**
 * What the handshake agreed on: the export, and the features that change how requests are answered.
 *
 * @param metaContexts     the metadata contexts the last {@code NBD_OPT_SET_META_CONTEXT} selected for this export,
 *                         in the order block status answers them; empty: block status is not allowed
 * @param blockSizeAgreed  the client asked for {@code NBD_INFO_BLOCK_SIZE} in GO, and so promised to keep to the
 *                         minimum block size it was sent; any other client may send requests of any alignment
 * @param context          who the client is, for the export's view of its connection: the name it asked for after the
 *                         export's ({@code boot/pc42}), its TLS identities, its peer
 */
public record Session(Export export, boolean structuredReplies, List<MetaContext> metaContexts, int transmissionFlags,
                      boolean blockSizeAgreed, io.jnbd.server.backend.ConnectionContext context) {
    public Session {
        metaContexts = List.copyOf(metaContexts);
    }

    public boolean blockStatusAllowed() {
        return !metaContexts.isEmpty();
    }

    /** The client was sent NBD_FLAG_READ_ONLY: the export is read-only, or is for this client (readonly-for=). */
    public boolean readOnly() {
        return (transmissionFlags & io.jnbd.protocol.Nbd.FLAG_READ_ONLY) != 0;
    }
}
