package io.jnbd.pool;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendFactory;
import io.jnbd.server.backend.BackendOptions;
import java.io.IOException;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Set;

/**
 * {@code pool:HOST:PORT,HOST:PORT,...,size=SIZE[,replicas=N][,extent=SIZE][,client=ID][,unit=N]
 * [,server-timeout=SECONDS][,recovery-rate=SIZE][,cache=SIZE][,readahead=SIZE]}: a virtual disk over memory servers (docs/pool.md).
 */
public final class PoolBackendFactory implements BackendFactory {
    @Override public String kind() { return "pool"; }

    @Override
    public String usage() {
        return "pool:HOST:PORT,HOST:PORT,...,size=SIZE[,replicas=N][,extent=SIZE][,server-timeout=S][,recovery-rate=SIZE][,cache=SIZE][,readahead=SIZE]";
    }

    @Override
    public Set<String> options() {
        return Set.of("size", "replicas", "extent", "client", "unit", "server-timeout", "recovery-rate", "candidates", "cache", "readahead");
    }

    /** Each memory server is a HOST:PORT; the first comes after {@code pool:}, the others follow it. */
    @Override
    public boolean continuesTarget(String part) {
        int colon = part.lastIndexOf(':');
        return colon > 0 && part.substring(colon + 1).chars().allMatch(Character::isDigit) && colon < part.length() - 1;
    }

    @Override
    public void check(String target, BackendOptions options) {
        config(target, options);
    }

    @Override
    public Set<Backend.Trait> traits(String target, BackendOptions options) {
        return Set.of(Backend.Trait.REMOTE);
    }

    @Override
    public Backend open(String target, BackendOptions options, boolean readOnly) throws IOException {
        return new PoolBackend(PoolVolume.open(config(target, options)));
    }

    static PoolConfig config(String target, BackendOptions o) {
        List<String> servers = Arrays.stream(target.split(",")).map(String::strip).filter(s -> !s.isEmpty()).toList();
        if (servers.isEmpty()) throw new IllegalArgumentException("pool: needs its memory servers, pool:HOST:PORT,HOST:PORT,...");
        for (String s : servers) MemServerLink.parse(s);
        if (!o.has("size")) throw new IllegalArgumentException("pool: needs size=SIZE, the virtual disk's size");
        long size = o.size("size", 0);
        int replicas = o.integer("replicas", 1, 16, Math.min(2, servers.size()));
        long extent = o.size("extent", PoolConfig.DEFAULT_EXTENT);
        if (extent > Integer.MAX_VALUE) throw new IllegalArgumentException("extent must be a power of two from 64K to 1G");
        int seconds = o.integer("server-timeout", 1, 3600, (int) PoolConfig.DEFAULT_SERVER_TIMEOUT.toSeconds());
        return new PoolConfig(servers, size, replicas, (int) extent, o.integer("client", 1, 0xFFFF, 0),
            o.integer("unit", 0, 0xFFFF, 0), Duration.ofSeconds(seconds), o.size("recovery-rate", PoolConfig.DEFAULT_RECOVERY_RATE),
            o.integer("candidates", 1, 64, 2), o.size("cache", 0), o.size("readahead", 0));
    }
}
