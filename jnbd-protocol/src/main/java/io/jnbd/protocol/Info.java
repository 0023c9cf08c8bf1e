package io.jnbd.protocol;

import java.nio.ByteBuffer;

/** The payloads of {@code NBD_REP_INFO} replies. */
public sealed interface Info {

    int type();

    int encodedLength();

    void encode(ByteBuffer out);

    record Export(long size, int transmissionFlags) implements Info {
        public int type() { return Nbd.INFO_EXPORT; }
        public int encodedLength() { return 12; }
        public void encode(ByteBuffer out) {
            out.putShort((short) Nbd.INFO_EXPORT).putLong(size).putShort((short) transmissionFlags);
        }
    }

    record Name(String name) implements Info {
        public int type() { return Nbd.INFO_NAME; }
        public int encodedLength() { return 2 + Strings.utf8(name).length; }
        public void encode(ByteBuffer out) {
            out.putShort((short) Nbd.INFO_NAME).put(Strings.utf8(name));
        }
    }

    record Description(String description) implements Info {
        public int type() { return Nbd.INFO_DESCRIPTION; }
        public int encodedLength() { return 2 + Strings.utf8(description).length; }
        public void encode(ByteBuffer out) {
            out.putShort((short) Nbd.INFO_DESCRIPTION).put(Strings.utf8(description));
        }
    }

    record BlockSize(int minimum, int preferred, int maximum) implements Info {
        public int type() { return Nbd.INFO_BLOCK_SIZE; }
        public int encodedLength() { return 14; }
        public void encode(ByteBuffer out) {
            out.putShort((short) Nbd.INFO_BLOCK_SIZE).putInt(minimum).putInt(preferred).putInt(maximum);
        }
    }

    /** An info type this side does not understand; the spec says to ignore it. */
    record Unknown(int type, int encodedLength) implements Info {
        public void encode(ByteBuffer out) {
            throw new UnsupportedOperationException("unknown info types are only decoded");
        }
    }

    /** Decodes the whole payload of one {@code NBD_REP_INFO}. */
    static Info decode(ByteBuffer in) throws ProtocolException {
        if (in.remaining() < 2) throw new ProtocolException("NBD_REP_INFO shorter than its type");
        int type = Short.toUnsignedInt(in.getShort());
        int rest = in.remaining();
        return switch (type) {
            case Nbd.INFO_EXPORT -> {
                if (rest != 10) throw new ProtocolException("NBD_INFO_EXPORT of " + rest + " bytes");
                yield new Export(in.getLong(), Short.toUnsignedInt(in.getShort()));
            }
            case Nbd.INFO_NAME -> new Name(Strings.read(in, rest));
            case Nbd.INFO_DESCRIPTION -> new Description(Strings.read(in, rest));
            case Nbd.INFO_BLOCK_SIZE -> {
                if (rest != 12) throw new ProtocolException("NBD_INFO_BLOCK_SIZE of " + rest + " bytes");
                yield new BlockSize(in.getInt(), in.getInt(), in.getInt());
            }
            default -> {
                in.position(in.limit());
                yield new Unknown(type, 2 + rest);
            }
        };
    }
}
