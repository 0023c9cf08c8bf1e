package io.jnbd.protocol;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/** UTF-8 strings as the spec defines them: length-prefixed or length-implied, at most 4096 bytes. */
public final class Strings {
    private Strings() {}

    /** The spec's upper bound on a string, so that names cannot be used to make a peer allocate without bound. */
    public static final int MAX_STRING = 4096;

    public static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** Reads {@code length} bytes of strict UTF-8. */
    public static String read(ByteBuffer in, long length) throws ProtocolException {
        if (length < 0 || length > MAX_STRING) {
            throw new ProtocolException("string of " + length + " bytes is longer than " + MAX_STRING);
        }
        if (length > in.remaining()) {
            throw new ProtocolException("string of " + length + " bytes overruns its message");
        }
        ByteBuffer slice = in.slice(in.position(), (int) length);
        in.position(in.position() + (int) length);
        try {
            return StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT)
                .decode(slice).toString();
        } catch (CharacterCodingException e) {
            throw new ProtocolException("string is not valid UTF-8");
        }
    }

    /** Reads a 32-bit length, then that many bytes of UTF-8. */
    public static String readPrefixed(ByteBuffer in) throws ProtocolException {
        if (in.remaining() < 4) throw new ProtocolException("string length overruns its message");
        return read(in, Integer.toUnsignedLong(in.getInt()));
    }

    public static void writePrefixed(ByteBuffer out, String s) {
        byte[] b = utf8(s);
        out.putInt(b.length).put(b);
    }
}
