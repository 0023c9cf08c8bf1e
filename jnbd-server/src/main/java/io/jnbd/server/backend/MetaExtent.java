package io.jnbd.server.backend;

/**
 * A run of bytes with one status in a metadata context other than {@code base:allocation}: {@code flags} mean what
 * that context defines (in {@code qemu:dirty-bitmap:NAME}, bit 0 set is dirty).
 */
public record MetaExtent(long length, int flags) {
    public MetaExtent {
        if (length <= 0) throw new IllegalArgumentException("extent length " + length);
    }
}
