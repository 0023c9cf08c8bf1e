package io.jnbd.protocol;

import java.nio.ByteBuffer;

/** The header of a client option in the handshake: IHAVEOPT, option, length of the data that follows. */
public record OptionHeader(int option, long length) {

    public static OptionHeader decode(ByteBuffer in) throws ProtocolException {
        long magic = in.getLong();
        if (magic != Nbd.IHAVEOPT) {
            throw new ProtocolException("bad option magic 0x" + Long.toHexString(magic));
        }
        return new OptionHeader(in.getInt(), Integer.toUnsignedLong(in.getInt()));
    }

    public static void encode(ByteBuffer out, int option, int length) {
        out.putLong(Nbd.IHAVEOPT).putInt(option).putInt(length);
    }
}
