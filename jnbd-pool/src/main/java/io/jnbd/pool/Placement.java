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

    /**
     * One server for an extent, none of {@code exclude}; null when none is up. A server known to have room is
     * preferred; when none is, the choice falls on those that are up all the same, since what a server last
     * said of its memory may be stale (a trim may have freed it since), and a full one answers ENOSPC.
     */
    MemServerLink pick(Set<MemServerLink> exclude) {
        List<MemServerLink> open = new ArrayList<>(), up = new ArrayList<>();
        for (MemServerLink l : links) {
            if (exclude.contains(l) || l.session() == null) continue;
            up.add(l);
            if (hasRoom(l)) open.add(l);
        }
        if (open.isEmpty()) open = up;
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

    private boolean hasRoom(MemServerLink l) {
        long free = l.free();
        return free < 0 || free >= extentSize; // not yet known counts as room: the write will say
    }
}
