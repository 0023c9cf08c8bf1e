package io.jnbd.protocol;

import java.nio.ByteBuffer;

/** The header of a server's reply to an option: magic, option, reply type, length of the data that follows. */
public record OptionReplyHeader(int option, int type, long length) {

    public static void encode(ByteBuffer out, int option, int type, int length) {
        out.putLong(Nbd.OPTION_REPLY_MAGIC).putInt(option).putInt(type).putInt(length);
    }

    public static OptionReplyHeader decode(ByteBuffer in) throws ProtocolException {
        long magic = in.getLong();
        if (magic != Nbd.OPTION_REPLY_MAGIC) {
            throw new ProtocolException("bad option reply magic 0x" + Long.toHexString(magic));
        }
        return new OptionReplyHeader(in.getInt(), in.getInt(), Integer.toUnsignedLong(in.getInt()));
    }

    public boolean isError() {
        return (type & Nbd.REP_FLAG_ERROR) != 0;
    }
}
