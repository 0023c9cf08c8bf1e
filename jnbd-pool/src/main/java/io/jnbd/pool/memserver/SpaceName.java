package io.jnbd.pool.memserver;

import java.util.HexFormat;

/**
 * The export name that opens one pool client's space on a memory server: {@code pool/CLIENT/UNIT/INSTANCE}, or
 * {@code pool/CLIENT/UNIT/INSTANCE/SESSION} (see docs/decisions/0005-memory-pool.md). CLIENT and UNIT are the
 * first two fields of the NMS global page identifier; INSTANCE tells one run of the pool client from the next;
 * SESSION numbers that run's reconnections to this server, so that the server can fence off the connections
 * of an older session (their queued writes must not land after the client has moved on).
 */
public record SpaceName(int client, int unit, long instance, int session) {
    public static final String PREFIX = "pool/";
    /** 2^32 pages of 4 KiB: the page index of a global page identifier is the byte offset over 4 KiB. */
    public static final long SPACE_BYTES = 1L << 44;

    public SpaceName(int client, int unit, long instance) {
        this(client, unit, instance, 0);
    }

    public SpaceName {
        if (session < 0) throw new IllegalArgumentException("session must not be negative, not " + session);
        if (client < 1 || client > 0xFFFF) throw new IllegalArgumentException("client id must be 1 to 65535, not " + client);
        if (unit < 0 || unit > 0xFFFF) throw new IllegalArgumentException("unit must be 0 to 65535, not " + unit);
    }

    /**
     * Exactly the form {@link #exportName()} writes: decimal ASCII digits without sign or leading zero, 16
     * lower-case hex digits, and a session above 0 or none (session 0). Anything else, {@code +7} or {@code 07} or another script's digits included, is no
     * space (one space must have one name, or two clients could share it under two spellings).
     */
    private static final java.util.regex.Pattern FORM =
        java.util.regex.Pattern.compile("pool/([1-9][0-9]{0,4})/(0|[1-9][0-9]{0,4})/([0-9a-f]{16})(?:/([1-9][0-9]{0,9}))?");

    /** The name, or null when {@code name} is not a well-formed space name. */
    public static SpaceName parse(String name) {
        var m = FORM.matcher(name);
        if (!m.matches()) return null;
        try {
            return new SpaceName(Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)), HexFormat.fromHexDigitsToLong(m.group(3)),
                m.group(4) == null ? 0 : Integer.parseInt(m.group(4)));
        } catch (IllegalArgumentException e) {
            return null; // a client or unit above 65535, a session above 2^31-1
        }
    }

    public String exportName() {
        String name = PREFIX + client + "/" + unit + "/" + HexFormat.of().toHexDigits(instance);
        return session == 0 ? name : name + "/" + session;
    }

    /**
     * The name as logs and status show it: the instance, which is the key to the space where there is no TLS
     * identity, replaced by its {@link #fingerprint}.
     */
    public String shown() {
        String name = PREFIX + client + "/" + unit + "/~" + fingerprint(instance);
        return session == 0 ? name : name + "/" + session;
    }

    /**
     * A short fingerprint of an instance, to tell instances apart in logs and status documents: six hex digits of
     * its SHA-256. It gives away 24 of the instance's 64 bits, which leaves 2^40 names to try one connection at a
     * time, each refused and logged.
     */
    public static String fingerprint(long instance) {
        try {
            byte[] digest = java.security.MessageDigest.getInstance("SHA-256")
                .digest(java.nio.ByteBuffer.allocate(Long.BYTES).putLong(instance).array());
            return HexFormat.of().formatHex(digest, 0, 3);
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new AssertionError("every JDK has SHA-256", e);
        }
    }

    /** {@code text} with every space name in it {@link #shown} without its instance: for messages that may be logged or shown. */
    public static String redact(String text) {
        if (text == null) return null;
        var m = IN_TEXT.matcher(text);
        StringBuilder out = new StringBuilder();
        while (m.find()) {
            SpaceName s = parse(m.group());
            m.appendReplacement(out, java.util.regex.Matcher.quoteReplacement(s == null ? "pool/?" : s.shown()));
        }
        return m.appendTail(out).toString();
    }

    private static final java.util.regex.Pattern IN_TEXT = java.util.regex.Pattern.compile("pool/[0-9]+/[0-9]+/[0-9a-f]{16}(?:/[0-9]+)?");

    /** Without the instance, as {@link #shown}: a name printed by mistake must not give the key away. */
    @Override
    public String toString() {
        return shown();
    }

    public SpaceName withSession(int s) {
        return new SpaceName(client, unit, instance, s);
    }

    /** The key of this space in a {@link PageStore}. */
    public int space() {
        return PageStore.space(client, unit);
    }
}
