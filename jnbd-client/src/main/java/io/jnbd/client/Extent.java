package io.jnbd.client;

import io.jnbd.protocol.Nbd;

/**
 * A run of the export with one {@code base:allocation} status.
 *
 * @param offset where the run starts
 * @param length how long it is
 * @param flags  {@link Nbd#STATE_HOLE} (not allocated) and/or {@link Nbd#STATE_ZERO} (reads as zeroes)
 */
public record Extent(long offset, long length, int flags) {

    public long end() {
        return offset + length;
    }

    /** Reads as zeroes: such a run need not be read to be copied. */
    public boolean zero() {
        return (flags & Nbd.STATE_ZERO) != 0;
    }

    public boolean hole() {
        return (flags & Nbd.STATE_HOLE) != 0;
    }
}
