package io.jnbd.tls;

import java.io.IOException;
import java.nio.ByteBuffer;

/**
 * TLS record framing, as far as this module needs it outside the engines: checking that the first bytes after
 * STARTTLS are a TLS handshake at all, so that a peer speaking plain NBD gets a clear line at its first five
 * bytes instead of an engine waiting for a 16 KiB "record" that never comes.
 */
final class Records {
    static final int HEADER = 5;
    /** RFC 8446 5.2: a ciphertext record is at most 2^14 + 256 bytes; TLS 1.2 allowed 2^14 + 2048. */
    static final int MAX_BODY = (1 << 14) + 2048;
    static final int MAX_RECORD = HEADER + MAX_BODY;

    private static final int ALERT = 21;
    private static final int HANDSHAKE = 22;

    private Records() {}

    /**
     * Reads from {@code raw} into {@code in} (write mode) until it holds a record header, and checks that the
     * header starts a handshake (or, from a server, an alert). {@code expected} names what should have come.
     */
    static void expectHandshake(RawChannel raw, ByteBuffer in, boolean alertAllowed, String expected) throws IOException {
        int start = in.position();
        while (in.position() - start < HEADER) {
            if (raw.read(in) < 0) {
                throw new TlsException(in.position() == start ? "the connection closed before " + expected
                    : "the connection closed in the middle of " + expected);
            }
        }
        int type = in.get(start) & 0xff;
        int major = in.get(start + 1) & 0xff;
        int length = in.getShort(start + 3) & 0xffff;
        boolean ok = (type == HANDSHAKE || (alertAllowed && type == ALERT)) && major == 3 && length > 0 && length <= MAX_BODY;
        if (!ok) {
            throw new TlsException("expected " + expected + " but received " + show(in, start, in.position())
                + ": the peer is not speaking TLS");
        }
    }

    /** The first bytes as text where printable, for a log line: "'IHAVEOPT' (49 48 41 56 ...)". */
    static String show(ByteBuffer b, int from, int to) {
        int n = Math.min(to - from, 8);
        StringBuilder text = new StringBuilder("'");
        StringBuilder hex = new StringBuilder();
        for (int i = 0; i < n; i++) {
            int c = b.get(from + i) & 0xff;
            text.append(c >= 0x20 && c < 0x7f ? (char) c : '.');
            hex.append(i == 0 ? "" : " ").append(String.format("%02x", c));
        }
        return text.append("' (").append(hex).append(n < to - from ? " ..." : "").append(')').toString();
    }
}
