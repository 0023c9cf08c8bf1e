package io.jnbd.protocol;

import java.nio.ByteBuffer;

/** The header of one structured reply chunk (20 bytes), followed by {@code length} bytes of payload. */
public record StructuredReplyHeader(int flags, int type, long cookie, long length) {

    public static void encode(ByteBuffer out, int flags, int type, long cookie, int length) {
        out.putInt(Nbd.STRUCTURED_REPLY_MAGIC).putShort((short) flags).putShort((short) type)
            .putLong(cookie).putInt(length);
    }

    /** Decodes the rest of a chunk header once its magic has been read. */
    public static StructuredReplyHeader decodeAfterMagic(ByteBuffer in) {
        int flags = Short.toUnsignedInt(in.getShort());
        int type = Short.toUnsignedInt(in.getShort());
        long cookie = in.getLong();
        long length = Integer.toUnsignedLong(in.getInt());
        return new StructuredReplyHeader(flags, type, cookie, length);
    }

    public boolean done() {
        return (flags & Nbd.REPLY_FLAG_DONE) != 0;
    }

    public boolean isError() {
        return (type & 0x8000) != 0;
    }
}
