package io.jnbd.tls;

import java.io.IOException;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.function.Predicate;

/**
 * Reads a ClientHello ahead of the engines, for a server that has both certificates and PSKs: X.509 sessions go to
 * the JDK and PSK sessions to BouncyCastle, so the first message has to say which one the client wants.
 */
final class ClientHello {
    private static final int PRE_SHARED_KEY = 41;
    private static final int SUPPORTED_VERSIONS = 43;
    private static final int TLS13 = 0x0304;
    private static final int MAX_HELLO = 4 * Records.MAX_RECORD;

    /** The raw records received (read mode, for the chosen engine) and whether the client asks for PSK. */
    record Routed(ByteBuffer records, boolean psk) {}

    private ClientHello() {}

    static Routed read(RawChannel raw, Predicate<String> knownIdentity) throws IOException {
        ByteBuffer records = ByteBuffer.allocate(MAX_HELLO);
        Records.expectHandshake(raw, records, false, "a TLS ClientHello");
        ByteBuffer message = ByteBuffer.allocate(MAX_HELLO);
        int parsed = 0;
        // Gather handshake record bodies until the ClientHello message is whole (it may span records).
        while (message.position() < 4 || message.position() < 4 + (message.getInt(0) & 0xffffff)) {
            if (records.position() - parsed >= Records.HEADER) {
                int length = records.getShort(parsed + 3) & 0xffff;
                if (records.position() - parsed >= Records.HEADER + length) {
                    if (records.get(parsed) != 22 || length > message.remaining()) throw malformed();
                    message.put(message.position(), records, parsed + Records.HEADER, length);
                    message.position(message.position() + length);
                    parsed += Records.HEADER + length;
                    continue;
                }
            }
            if (!records.hasRemaining()) throw malformed();
            if (raw.read(records) < 0) throw new TlsException("the connection closed in the middle of the ClientHello");
        }
        message.flip();
        boolean psk;
        try {
            psk = wantsPsk(message, knownIdentity);
        } catch (BufferUnderflowException | IllegalArgumentException e) {
            throw malformed();
        }
        return new Routed(records.flip(), psk);
    }

    /**
     * A TLS 1.3 client asks for PSK with a pre_shared_key extension naming an identity we know (or a printable one:
     * a resumption ticket is binary); a TLS 1.2 client by offering a PSK cipher suite.
     */
    private static boolean wantsPsk(ByteBuffer m, Predicate<String> knownIdentity) {
        if (m.get() != 1) throw new IllegalArgumentException("not a ClientHello");
        m.position(m.position() + 3 + 2 + 32);  // length, legacy_version, random
        skip(m, m.get() & 0xff);                 // legacy_session_id
        int suitesEnd = (m.getShort() & 0xffff) + m.position();
        boolean pskSuite = false;
        while (m.position() < suitesEnd) pskSuite |= PskSuites.isTls12Psk(m.getShort() & 0xffff);
        skip(m, m.get() & 0xff);                 // legacy_compression_methods
        boolean tls13 = false;
        boolean pskIdentity = false;
        if (m.remaining() >= 2) {
            int end = (m.getShort() & 0xffff) + m.position();
            while (m.position() < end) {
                int type = m.getShort() & 0xffff;
                int length = m.getShort() & 0xffff;
                ByteBuffer data = m.slice(m.position(), length);
                skip(m, length);
                if (type == SUPPORTED_VERSIONS) {
                    for (int n = data.get() & 0xff; n >= 2; n -= 2) tls13 |= (data.getShort() & 0xffff) == TLS13;
                } else if (type == PRE_SHARED_KEY) {
                    int identitiesEnd = (data.getShort() & 0xffff) + data.position();
                    while (data.position() < identitiesEnd) {
                        byte[] id = new byte[data.getShort() & 0xffff];
                        data.get(id);
                        data.getInt(); // obfuscated_ticket_age
                        String name = new String(id, StandardCharsets.UTF_8);
                        pskIdentity |= knownIdentity.test(name) || printable(id);
                    }
                }
            }
        }
        return pskIdentity || (pskSuite && !tls13);
    }

    private static boolean printable(byte[] id) {
        if (id.length == 0 || id.length > 128) return false;
        for (byte b : id) if (b < 0x20 || b > 0x7e) return false;
        return true;
    }

    private static void skip(ByteBuffer b, int n) {
        if (n > b.remaining()) throw new BufferUnderflowException();
        b.position(b.position() + n);
    }

    private static TlsException malformed() {
        return new TlsException("TLS handshake failed: malformed ClientHello");
    }
}
