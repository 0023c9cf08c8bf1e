package io.jnbd.server.backend;

import io.jnbd.protocol.Nbd;

/** Minimum block, preferred block and maximum payload, as in the spec's "Size constraints". */
public record BlockSizes(int minimum, int preferred, int maximum) {
    public static final BlockSizes DEFAULT = new BlockSizes(1, 4096, Nbd.DEFAULT_MAX_PAYLOAD);

    public BlockSizes {
        if (Integer.bitCount(minimum) != 1 || minimum > 65536) throw new IllegalArgumentException("minimum block " + minimum);
        if (Integer.bitCount(preferred) != 1 || preferred < Math.max(minimum, 512)) throw new IllegalArgumentException("preferred block " + preferred);
        if (maximum < preferred) throw new IllegalArgumentException("maximum payload " + maximum);
    }
}
