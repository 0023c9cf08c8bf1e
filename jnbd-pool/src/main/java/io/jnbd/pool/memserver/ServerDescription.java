package io.jnbd.pool.memserver;

import java.util.HexFormat;

/**
 * What a memory server says about itself in the {@code NBD_INFO_DESCRIPTION} of a space, read in the same
 * {@code NBD_OPT_GO} that opens it: {@code jnbd memory server; incarnation=HEX; free=BYTES; ram=BYTES; spill=BYTES}.
 * Human-readable in nbdinfo, and parsed by the pool client (docs/decisions/0005-memory-pool.md).
 *
 * @param incarnation drawn at the server's start: a restarted server is a new incarnation, hence empty
 * @param free        bytes of new data it can still take, RAM and spill together
 */
public record ServerDescription(long incarnation, long free, long ram, long spill) {
    private static final String HEAD = "jnbd memory server";

    public String text() {
        return HEAD + "; incarnation=" + HexFormat.of().toHexDigits(incarnation) + "; free=" + free + "; ram=" + ram
            + "; spill=" + spill;
    }

    /** Parses {@link #text()}; null when {@code text} is not a memory server's description. */
    public static ServerDescription parse(String text) {
        if (text == null || !text.startsWith(HEAD + ";")) return null;
        long incarnation = -1, free = -1, ram = -1, spill = -1;
        for (String part : text.substring(HEAD.length() + 1).split(";")) {
            String[] kv = part.strip().split("=", 2);
            if (kv.length != 2) continue;
            try {
                switch (kv[0]) {
                    case "incarnation" -> incarnation = HexFormat.fromHexDigitsToLong(kv[1]);
                    case "free" -> free = Long.parseLong(kv[1]);
                    case "ram" -> ram = Long.parseLong(kv[1]);
                    case "spill" -> spill = Long.parseLong(kv[1]);
                    default -> { } // fields a newer server adds
                }
            } catch (IllegalArgumentException e) {
                return null;
            }
        }
        return incarnation == -1 || free < 0 ? null : new ServerDescription(incarnation, free, Math.max(ram, 0), Math.max(spill, 0));
    }
}
