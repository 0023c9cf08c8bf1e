package io.jnbd.protocol;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/** The data of {@code NBD_OPT_LIST_META_CONTEXT} and {@code NBD_OPT_SET_META_CONTEXT}. */
public record MetaContextRequest(String exportName, List<String> queries) {

    /** More queries than any real client sends; bounds the work one option can cause. */
    public static final int MAX_QUERIES = 128;

    public static MetaContextRequest decode(ByteBuffer in) throws ProtocolException {
        String name = Strings.readPrefixed(in);
        if (in.remaining() < 4) throw new ProtocolException("meta context query count missing");
        long count = Integer.toUnsignedLong(in.getInt());
        if (count > MAX_QUERIES) throw new ProtocolException("too many meta context queries: " + count);
        List<String> queries = new ArrayList<>((int) count);
        for (int i = 0; i < count; i++) queries.add(Strings.readPrefixed(in));
        if (in.hasRemaining()) throw new ProtocolException("trailing bytes after meta context queries");
        return new MetaContextRequest(name, List.copyOf(queries));
    }

    public int encodedLength() {
        int n = 4 + Strings.utf8(exportName).length + 4;
        for (String q : queries) n += 4 + Strings.utf8(q).length;
        return n;
    }

    public void encode(ByteBuffer out) {
        Strings.writePrefixed(out, exportName);
        out.putInt(queries.size());
        for (String q : queries) Strings.writePrefixed(out, q);
    }
}
