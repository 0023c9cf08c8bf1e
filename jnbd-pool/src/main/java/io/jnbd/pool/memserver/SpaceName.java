package io.jnbd.pool.memserver;

import java.util.HexFormat;

/**
 * The export name that opens one pool client's space on a memory server: {@code pool/CLIENT/UNIT/INSTANCE}
 * (see docs/decisions/0005-memory-pool.md). CLIENT and UNIT are the first two fields of the NMS global page
 * identifier; INSTANCE tells one run of the pool client from the next.
 */
public record SpaceName(int client, int unit, long instance) {
    public static final String PREFIX = "pool/";
    /** 2^32 pages of 4 KiB: the page index of a global page identifier is the byte offset over 4 KiB. */
    public static final long SPACE_BYTES = 1L << 44;

    public SpaceName {
        if (client < 1 || client > 0xFFFF) throw new IllegalArgumentException("client id must be 1 to 65535, not " + client);
        if (unit < 0 || unit > 0xFFFF) throw new IllegalArgumentException("unit must be 0 to 65535, not " + unit);
    }

    /** The name, or null when {@code name} is not a well-formed space name. */
    public static SpaceName parse(String name) {
        if (!name.startsWith(PREFIX)) return null;
        String[] p = name.substring(PREFIX.length()).split("/", -1);
        if (p.length != 3 || p[2].length() != 16) return null;
        try {
            return new SpaceName(Integer.parseInt(p[0]), Integer.parseInt(p[1]), HexFormat.fromHexDigitsToLong(p[2]));
        } catch (IllegalArgumentException e) {
            return null;
        }
    }

    public String exportName() {
        return PREFIX + client + "/" + unit + "/" + HexFormat.of().toHexDigits(instance);
    }

    /** The key of this space in a {@link PageStore}. */
    public int space() {
        return PageStore.space(client, unit);
    }
}
