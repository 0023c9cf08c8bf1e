package io.jnbd.client;

/**
 * A run of the export with one status in some metadata context, its flags as the server sent them: their meaning
 * is the context's ({@code base:allocation}: {@code NBD_STATE_HOLE} = 1, {@code NBD_STATE_ZERO} = 2;
 * {@code qemu:dirty-bitmap:NAME}: 1 = dirty). See {@link NbdClient#blockStatus(String, long, long)}.
 *
 * @param offset where the run starts
 * @param length how long it is
 * @param flags  the context's 32 status bits
 */
public record MetaExtent(long offset, long length, int flags) {

    /** The status bit of {@code qemu:dirty-bitmap:NAME} contexts: written since the bitmap was cleared. */
    public static final int DIRTY = 1;

    public long end() {
        return offset + length;
    }

    /** Whether every bit of {@code mask} is set. */
    public boolean has(int mask) {
        return (flags & mask) == mask;
    }
}
