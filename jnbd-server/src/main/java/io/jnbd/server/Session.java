package io.jnbd.server;

/**
 * What the handshake agreed on: the export, and the features that change how requests are answered.
 *
 * @param metaContextId    the id of {@code base:allocation} if it was selected for this export, else 0
 * @param blockSizeAgreed  the client asked for {@code NBD_INFO_BLOCK_SIZE} in GO, and so promised to keep to the
 *                         minimum block size it was sent; any other client may send requests of any alignment
 * @param context          who the client is, for the export's view of its connection: the name it asked for after the
 *                         export's ({@code boot/pc42}), its TLS identities, its peer
 */
public record Session(Export export, boolean structuredReplies, int metaContextId, int transmissionFlags,
                      boolean blockSizeAgreed, io.jnbd.server.backend.ConnectionContext context) {
    public boolean blockStatusAllowed() {
        return metaContextId != 0;
    }

    /** The client was sent NBD_FLAG_READ_ONLY: the export is read-only, or is for this client (readonly-for=). */
    public boolean readOnly() {
        return (transmissionFlags & io.jnbd.protocol.Nbd.FLAG_READ_ONLY) != 0;
    }
}
