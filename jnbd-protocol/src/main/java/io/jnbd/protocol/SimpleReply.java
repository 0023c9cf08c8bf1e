package io.jnbd.protocol;

import java.nio.ByteBuffer;

/** A simple reply header (16 bytes); for a successful read it is followed by the data. */
public record SimpleReply(int error, long cookie) {

    public static void encode(ByteBuffer out, int error, long cookie) {
        out.putInt(Nbd.SIMPLE_REPLY_MAGIC).putInt(error).putLong(cookie);
    }

    /** Decodes the rest of a simple reply once its magic has been read. */
    public static SimpleReply decodeAfterMagic(ByteBuffer in) {
        return new SimpleReply(in.getInt(), in.getLong());
    }
}
