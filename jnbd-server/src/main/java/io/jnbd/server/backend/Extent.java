package io.jnbd.server.backend;

import io.jnbd.protocol.Nbd;

/** A run of bytes with one allocation status, as {@code base:allocation} reports it. */
public record Extent(long length, boolean hole, boolean zero) {
    public int flags() {
        return (hole ? Nbd.STATE_HOLE : 0) | (zero ? Nbd.STATE_ZERO : 0);
    }
}
