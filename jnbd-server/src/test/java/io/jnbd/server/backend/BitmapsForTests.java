package io.jnbd.server.backend;

import io.jnbd.protocol.Nbd;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Answers metadata contexts (dirty bitmaps, say) from tables of extents that describe the whole disk, in front of
 * any backend. Contexts may be put and removed while the server runs, as an operator adds or removes a bitmap.
 * Public, in the test jar, for the interop tests that show real clients these contexts.
 */
public final class BitmapsForTests extends FilterForTests {
    private final Map<String, List<MetaExtent>> tables = new LinkedHashMap<>();

    public BitmapsForTests(Backend inner) {
        super(inner);
    }

    public synchronized void put(String context, List<MetaExtent> table) {
        tables.put(context, List.copyOf(table));
    }

    public synchronized void remove(String context) {
        tables.remove(context);
    }

    @Override
    public synchronized List<String> metaContexts() {
        return List.copyOf(tables.keySet());
    }

    /** The table's extents that meet the range, the first one cut to start at {@code offset}; the last may go past it. */
    @Override
    public synchronized List<MetaExtent> metaExtents(String context, long offset, long length) throws IOException {
        List<MetaExtent> table = tables.get(context);
        if (table == null) throw new NbdErrorException(Nbd.EINVAL, "no metadata context " + context);
        List<MetaExtent> out = new ArrayList<>();
        long start = 0;
        for (MetaExtent e : table) {
            long end = start + e.length();
            if (end > offset && start < offset + length) out.add(new MetaExtent(end - Math.max(start, offset), e.flags()));
            start = end;
        }
        return out;
    }
}
