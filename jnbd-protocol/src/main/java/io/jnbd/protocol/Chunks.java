package io.jnbd.protocol;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * Structured reply chunks: encoders for the server side (header plus the fixed part of the payload;
 * block data itself is written separately so that it never has to be copied) and payload decoders
 * for the client side.
 */
public final class Chunks {
    private Chunks() {}

    /** Header and offset of an {@code OFFSET_DATA} chunk; {@code dataLength} bytes of data follow. */
    public static final int OFFSET_DATA_PREFIX = Nbd.STRUCTURED_REPLY_SIZE + 8;
    public static final int OFFSET_HOLE_SIZE = Nbd.STRUCTURED_REPLY_SIZE + 12;

    public static void offsetDataPrefix(ByteBuffer out, int flags, long cookie, long offset, int dataLength) {
        StructuredReplyHeader.encode(out, flags, Nbd.REPLY_TYPE_OFFSET_DATA, cookie, 8 + dataLength);
        out.putLong(offset);
    }

    public static void offsetHole(ByteBuffer out, int flags, long cookie, long offset, int holeLength) {
        StructuredReplyHeader.encode(out, flags, Nbd.REPLY_TYPE_OFFSET_HOLE, cookie, 12);
        out.putLong(offset).putInt(holeLength);
    }

    public static void none(ByteBuffer out, long cookie) {
        StructuredReplyHeader.encode(out, Nbd.REPLY_FLAG_DONE, Nbd.REPLY_TYPE_NONE, cookie, 0);
    }

    public static int errorSize(String message) {
        return Nbd.STRUCTURED_REPLY_SIZE + 6 + Strings.utf8(message).length;
    }

    public static void error(ByteBuffer out, int flags, long cookie, int error, String message) {
        byte[] msg = Strings.utf8(message);
        StructuredReplyHeader.encode(out, flags, Nbd.REPLY_TYPE_ERROR, cookie, 6 + msg.length);
        out.putInt(error).putShort((short) msg.length).put(msg);
    }

    public static int errorOffsetSize(String message) {
        return errorSize(message) + 8;
    }

    public static void errorOffset(ByteBuffer out, int flags, long cookie, int error, String message, long offset) {
        byte[] msg = Strings.utf8(message);
        StructuredReplyHeader.encode(out, flags, Nbd.REPLY_TYPE_ERROR_OFFSET, cookie, 6 + msg.length + 8);
        out.putInt(error).putShort((short) msg.length).put(msg).putLong(offset);
    }

    public static int blockStatusSize(int descriptors) {
        return Nbd.STRUCTURED_REPLY_SIZE + 4 + descriptors * BlockStatusDescriptor.SIZE;
    }

    public static void blockStatus(ByteBuffer out, int flags, long cookie, int contextId,
                                   List<BlockStatusDescriptor> descriptors) {
        StructuredReplyHeader.encode(out, flags, Nbd.REPLY_TYPE_BLOCK_STATUS, cookie,
            4 + descriptors.size() * BlockStatusDescriptor.SIZE);
        out.putInt(contextId);
        for (var d : descriptors) out.putInt((int) d.length()).putInt(d.flags());
    }

    /** The payload of an {@code ERROR} or {@code ERROR_OFFSET} chunk. {@code offset} is -1 for plain errors. */
    public record ErrorPayload(int error, String message, long offset) {}

    public static ErrorPayload decodeError(int type, ByteBuffer payload) throws ProtocolException {
        if (payload.remaining() < 6) throw new ProtocolException("error chunk shorter than 6 bytes");
        int error = payload.getInt();
        int msgLength = Short.toUnsignedInt(payload.getShort());
        int tail = type == Nbd.REPLY_TYPE_ERROR_OFFSET ? 8 : 0;
        if (payload.remaining() != msgLength + tail) {
            throw new ProtocolException("error chunk message length " + msgLength + " disagrees with chunk length");
        }
        String message = Strings.read(payload, msgLength);
        long offset = tail == 8 ? payload.getLong() : -1;
        return new ErrorPayload(error, message, offset);
    }

    public record BlockStatusPayload(int contextId, List<BlockStatusDescriptor> descriptors) {}

    public static BlockStatusPayload decodeBlockStatus(ByteBuffer payload) throws ProtocolException {
        if (payload.remaining() < 4 + BlockStatusDescriptor.SIZE || (payload.remaining() - 4) % BlockStatusDescriptor.SIZE != 0) {
            throw new ProtocolException("block status chunk of " + payload.remaining() + " bytes");
        }
        int id = payload.getInt();
        List<BlockStatusDescriptor> list = new ArrayList<>(payload.remaining() / BlockStatusDescriptor.SIZE);
        while (payload.hasRemaining()) {
            long length = Integer.toUnsignedLong(payload.getInt());
            int flags = payload.getInt();
            if (length == 0) throw new ProtocolException("block status descriptor of length 0");
            list.add(new BlockStatusDescriptor(length, flags));
        }
        return new BlockStatusPayload(id, List.copyOf(list));
    }
}
