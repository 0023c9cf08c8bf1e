package io.jnbd.pool;

import io.jnbd.tls.TlsClientSettings;
import java.time.Duration;
import java.util.List;

/**
 * A pool volume's settings, as {@code pool:HOST:PORT,HOST:PORT,...,size=8G,replicas=2} gives them.
 *
 * @param servers        the memory servers, {@code HOST:PORT} each
 * @param size           the virtual disk's size in bytes
 * @param replicas       copies of every extent (N)
 * @param extentSize     the unit of placement: each extent lives on one replica group
 * @param client         the client id on the memory servers (1-65535), or 0 to draw one at random
 * @param unit           the virtual unit this volume is, among the client's units
 * @param serverTimeout  a memory server that leaves a request unanswered this long is taken as lost
 * @param recoveryRate   bytes per second the background copying may use to restore N copies; 0 = unlimited
 * @param candidates     servers drawn at random for each placement, of which the least loaded wins (d)
 * @param cacheSize      bytes of the client-side page cache (NMS: the client's LRU); 0, the default, for none
 * @param readahead      bytes a sequential reader has fetched ahead into the cache (NMS prepaging); needs a cache
 * @param tls            TLS on every link to a memory server (its server name is each server's host); null: plain text
 */
public record PoolConfig(List<String> servers, long size, int replicas, int extentSize, int client, int unit,
                         Duration serverTimeout, long recoveryRate, int candidates, long cacheSize, long readahead,
                         TlsClientSettings tls) {

    public static final int DEFAULT_EXTENT = 4 << 20;
    public static final Duration DEFAULT_SERVER_TIMEOUT = Duration.ofSeconds(3);
    public static final long DEFAULT_RECOVERY_RATE = 512L << 20;

    public PoolConfig {
        servers = List.copyOf(servers);
        if (servers.isEmpty()) throw new IllegalArgumentException("a pool needs at least one memory server");
        if (size <= 0) throw new IllegalArgumentException("size must be positive");
        if (replicas < 1 || replicas > servers.size()) {
            throw new IllegalArgumentException("replicas must be 1 to the number of servers (" + servers.size() + "), not " + replicas);
        }
        if (extentSize < (64 << 10) || Integer.bitCount(extentSize) != 1 || extentSize > (1 << 30)) {
            throw new IllegalArgumentException("extent must be a power of two from 64K to 1G");
        }
        if (size > (1L << 44)) throw new IllegalArgumentException("size must be at most 16T (a unit's page index is 32 bits of 4 KiB pages)");
        if (client < 0 || client > 0xFFFF) throw new IllegalArgumentException("client must be 1 to 65535 (0: draw one)");
        if (unit < 0 || unit > 0xFFFF) throw new IllegalArgumentException("unit must be 0 to 65535");
        if (serverTimeout.isNegative() || serverTimeout.isZero()) throw new IllegalArgumentException("server timeout must be positive");
        if (recoveryRate < 0) throw new IllegalArgumentException("recovery rate must not be negative");
        if (candidates < 1) throw new IllegalArgumentException("candidates must be at least 1");
        if (cacheSize < 0 || readahead < 0) throw new IllegalArgumentException("cache and readahead must not be negative");
        if (readahead > 0 && cacheSize == 0) throw new IllegalArgumentException("readahead needs a cache (cache=SIZE)");
        if (readahead > cacheSize / 2 && cacheSize > 0) {
            throw new IllegalArgumentException("readahead must be at most half the cache, or it evicts what it fetched");
        }
    }

    /** Links in plain text. */
    public PoolConfig(List<String> servers, long size, int replicas, int extentSize, int client, int unit,
                      Duration serverTimeout, long recoveryRate, int candidates, long cacheSize, long readahead) {
        this(servers, size, replicas, extentSize, client, unit, serverTimeout, recoveryRate, candidates, cacheSize, readahead, null);
    }

    public static PoolConfig of(List<String> servers, long size, int replicas) {
        return new PoolConfig(servers, size, replicas, DEFAULT_EXTENT, 0, 0, DEFAULT_SERVER_TIMEOUT, DEFAULT_RECOVERY_RATE, 2, 0, 0);
    }

    public PoolConfig withExtentSize(int bytes) {
        return new PoolConfig(servers, size, replicas, bytes, client, unit, serverTimeout, recoveryRate, candidates, cacheSize, readahead, tls);
    }

    public PoolConfig withClient(int id) {
        return new PoolConfig(servers, size, replicas, extentSize, id, unit, serverTimeout, recoveryRate, candidates, cacheSize, readahead, tls);
    }

    public PoolConfig withUnit(int u) {
        return new PoolConfig(servers, size, replicas, extentSize, client, u, serverTimeout, recoveryRate, candidates, cacheSize, readahead, tls);
    }

    public PoolConfig withServerTimeout(Duration d) {
        return new PoolConfig(servers, size, replicas, extentSize, client, unit, d, recoveryRate, candidates, cacheSize, readahead, tls);
    }

    public PoolConfig withRecoveryRate(long bytesPerSecond) {
        return new PoolConfig(servers, size, replicas, extentSize, client, unit, serverTimeout, bytesPerSecond, candidates, cacheSize, readahead, tls);
    }

    /** A page cache of {@code bytes}, of which a sequential reader prefetches {@code ahead}. */
    public PoolConfig withCache(long bytes, long ahead) {
        return new PoolConfig(servers, size, replicas, extentSize, client, unit, serverTimeout, recoveryRate, candidates, bytes, ahead, tls);
    }

    /** Links over TLS with {@code settings}; null for plain text. */
    public PoolConfig withTls(TlsClientSettings settings) {
        return new PoolConfig(servers, size, replicas, extentSize, client, unit, serverTimeout, recoveryRate, candidates, cacheSize, readahead, settings);
    }

    public int extentCount() {
        return (int) ((size + extentSize - 1) / extentSize);
    }
}
