package io.jnbd.pool;

import io.jnbd.pool.memserver.StatusJson;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A pool volume's state, for {@code jnbd pool status} and the serving export's status: each memory server with
 * its load and the extents it holds, how many extents have fewer than N copies or none, and how recovery goes.
 */
public record PoolStatus(long size, int replicas, int extentSize, int client, int unit, List<Server> servers,
                         int extents, int placed, int belowReplicas, int lost, Recovery recovery) {

    /** {@code free}: what the server last said it can take, -1 while it is down or has not said. */
    public record Server(String address, String state, String incarnation, long free, int extents, int inFlight,
                         String lastError) {}

    /** {@code queued}: extents waiting for or in repair; {@code waiting}: those that found no server to copy to. */
    public record Recovery(int queued, int waiting, long extentsRestored, long bytesCopied, long bytesPerSecond) {}

    static PoolStatus of(PoolVolume v, io.jnbd.pool.Recovery r) {
        Map<MemServerLink, Integer> held = new HashMap<>();
        int placed = 0, below = 0, lost = 0, wanted = v.config().replicas();
        for (int i = 0; i < v.extentCount(); i++) {
            Extent e = v.extent(i);
            if (e == null) continue;
            placed++;
            if (e.lost()) {
                lost++;
                continue;
            }
            if (!e.healthy(wanted)) below++;
            for (Replica rep : e.replicas()) if (rep.readable()) held.merge(rep.link, 1, Integer::sum);
        }
        List<Server> servers = new ArrayList<>();
        for (MemServerLink l : v.links()) {
            MemServerLink.Session s = l.session();
            servers.add(new Server(l.name(), s == null ? "down" : "up", s == null ? null : Long.toHexString(s.incarnation()),
                s == null ? -1 : l.free(), held.getOrDefault(l, 0), l.inFlight(), s == null ? l.lastError() : null));
        }
        PoolConfig c = v.config();
        return new PoolStatus(c.size(), wanted, c.extentSize(), v.space().client(), c.unit(), servers, v.extentCount(),
            placed, below, lost, new Recovery(r.queued(), r.waiting(), r.extentsRestored(), r.bytesCopied(), r.rate()));
    }

    public byte[] toJson() {
        return StatusJson.write(this);
    }

    /** Parses what the status export served: JSON, then padding. */
    public static PoolStatus parse(byte[] bytes) throws IOException {
        return StatusJson.read(bytes, PoolStatus.class);
    }
}
