package io.jnbd.pool;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Load-aware choice of memory servers (NMS, after Mitzenmacher's "power of d choices"): draw {@code d} servers at
 * random among those that are up and have room, keep the one with the most free memory. It spreads extents as
 * evenly as asking every server would, without looking at them all.
 */
final class Placement {
    private final List<MemServerLink> links;
    private final int candidates;
    private final long extentSize;

    Placement(List<MemServerLink> links, int candidates, long extentSize) {
        this.links = links;
        this.candidates = candidates;
        this.extentSize = extentSize;
    }

    /** What a placement found when it could not place. */
    enum Shortage { NONE_UP, ALL_FULL }

    /** One server for an extent, none of {@code exclude}; null when none is up with room. */
    MemServerLink pick(Set<MemServerLink> exclude) {
        List<MemServerLink> open = new ArrayList<>();
        for (MemServerLink l : links) {
            if (!exclude.contains(l) && l.session() != null && hasRoom(l)) open.add(l);
        }
        if (open.isEmpty()) return null;
        MemServerLink best = null;
        ThreadLocalRandom random = ThreadLocalRandom.current();
        for (int i = 0; i < Math.min(candidates, open.size()); i++) {
            MemServerLink c = open.remove(random.nextInt(open.size()));
            if (best == null || c.free() > best.free()) best = c;
        }
        best.reserve(extentSize);
        return best;
    }

    /** Why nothing could be placed: no server up, or every one that is up is full. */
    Shortage shortage() {
        for (MemServerLink l : links) if (l.session() != null) return Shortage.ALL_FULL;
        return Shortage.NONE_UP;
    }

    private boolean hasRoom(MemServerLink l) {
        long free = l.free();
        return free < 0 || free >= extentSize; // not yet known counts as room: the write will say
    }
}
