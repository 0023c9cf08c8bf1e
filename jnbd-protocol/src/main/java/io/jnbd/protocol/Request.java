package io.jnbd.protocol;

import java.nio.ByteBuffer;

/**
 * A transmission-phase request header (28 bytes). Offsets and lengths are unsigned on the wire:
 * {@code offset} is kept as the raw 64-bit pattern and {@code length} as an unsigned int in a long.
 */
public record Request(int flags, int type, long cookie, long offset, long length) {

    public static Request decode(ByteBuffer in) throws ProtocolException {
        int magic = in.getInt();
        if (magic != Nbd.REQUEST_MAGIC) {
            throw new ProtocolException("bad request magic 0x" + Integer.toHexString(magic));
        }
        int flags = Short.toUnsignedInt(in.getShort());
        int type = Short.toUnsignedInt(in.getShort());
        long cookie = in.getLong();
        long offset = in.getLong();
        long length = Integer.toUnsignedLong(in.getInt());
        return new Request(flags, type, cookie, offset, length);
    }

    public void encode(ByteBuffer out) {
        out.putInt(Nbd.REQUEST_MAGIC).putShort((short) flags).putShort((short) type)
            .putLong(cookie).putLong(offset).putInt((int) length);
    }

    public boolean has(int flag) {
        return (flags & flag) != 0;
    }

    /** True if the request carries a payload of {@code length} bytes after the header. */
    public boolean hasPayload() {
        return type == Nbd.CMD_WRITE;
    }

    @Override
    public String toString() {
        return Nbd.commandName(type) + "(cookie=" + cookie + ", offset=" + Long.toUnsignedString(offset)
            + ", length=" + length + (flags != 0 ? ", flags=0x" + Integer.toHexString(flags) : "") + ")";
    }
}
