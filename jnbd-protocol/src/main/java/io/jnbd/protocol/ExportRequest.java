package io.jnbd.protocol;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/** The data of {@code NBD_OPT_INFO} and {@code NBD_OPT_GO}: an export name and the info types asked for. */
public record ExportRequest(String name, List<Integer> infoRequests) {

    public static ExportRequest decode(ByteBuffer in) throws ProtocolException {
        if (in.remaining() < 6) throw new ProtocolException("INFO/GO data shorter than 6 bytes");
        long nameLength = Integer.toUnsignedLong(in.getInt());
        if (nameLength > in.remaining() - 2) throw new ProtocolException("export name overruns INFO/GO data");
        String name = Strings.read(in, nameLength);
        int count = Short.toUnsignedInt(in.getShort());
        if (in.remaining() != count * 2L) {
            throw new ProtocolException("INFO/GO lists " + count + " info requests but carries " + in.remaining() + " bytes");
        }
        List<Integer> infos = new ArrayList<>(count);
        for (int i = 0; i < count; i++) infos.add(Short.toUnsignedInt(in.getShort()));
        return new ExportRequest(name, List.copyOf(infos));
    }

    public int encodedLength() {
        return 4 + Strings.utf8(name).length + 2 + 2 * infoRequests.size();
    }

    public void encode(ByteBuffer out) {
        Strings.writePrefixed(out, name);
        out.putShort((short) infoRequests.size());
        for (int info : infoRequests) out.putShort((short) info);
    }
}
