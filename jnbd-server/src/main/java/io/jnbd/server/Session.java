package io.jnbd.server;

/**
 * What the handshake agreed on: the export, and the features that change how requests are answered.
 *
 * @param metaContextId the id of {@code base:allocation} if it was selected for this export, else 0
 */
public record Session(Export export, boolean structuredReplies, int metaContextId, int transmissionFlags) {
    public boolean blockStatusAllowed() {
        return metaContextId != 0;
    }
}
