package io.jnbd.server;

import io.jnbd.protocol.Nbd;

/**
 * A metadata context selected for a connection with {@code NBD_OPT_SET_META_CONTEXT}: the id its block status chunks
 * carry, and its full name ({@code base:allocation}, {@code qemu:dirty-bitmap:b0}).
 */
public record MetaContext(int id, String name) {
    /** Answered by the backend's {@code extents}; every other context by its {@code metaExtents}. */
    public boolean baseAllocation() {
        return name.equals(Nbd.CONTEXT_BASE_ALLOCATION);
    }
}
