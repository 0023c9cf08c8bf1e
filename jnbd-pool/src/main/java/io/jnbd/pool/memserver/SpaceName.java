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

    /**
     * Exactly the form {@link #exportName()} writes: decimal ASCII digits without sign or leading zero, and 16
     * lower-case hex digits. Anything else, {@code +7} or {@code 07} or another script's digits included, is no
     * space (one space must have one name, or two clients could share it under two spellings).
     */
    private static final java.util.regex.Pattern FORM =
        java.util.regex.Pattern.compile("pool/([1-9][0-9]{0,4})/(0|[1-9][0-9]{0,4})/([0-9a-f]{16})");

    /** The name, or null when {@code name} is not a well-formed space name. */
    public static SpaceName parse(String name) {
        var m = FORM.matcher(name);
        if (!m.matches()) return null;
        try {
            return new SpaceName(Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)), HexFormat.fromHexDigitsToLong(m.group(3)));
        } catch (IllegalArgumentException e) {
            return null; // a client or unit above 65535
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
