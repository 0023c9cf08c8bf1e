package io.jnbd.protocol;

/** One extent of a {@code NBD_REPLY_TYPE_BLOCK_STATUS} chunk: a length and the context's status flags. */
public record BlockStatusDescriptor(long length, int flags) {
    public static final int SIZE = 8;
}
