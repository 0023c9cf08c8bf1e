package io.jnbd.pool;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendFactory;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.tls.TlsClientSettings;
import java.io.IOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code pool:HOST:PORT,HOST:PORT,...,size=SIZE[,replicas=N][,extent=SIZE][,client=ID][,unit=N]
 * [,server-timeout=SECONDS][,recovery-rate=SIZE][,cache=SIZE][,readahead=SIZE]
 * [,tls-certificates=DIR|,tls-psk-file=FILE[,tls-username=IDENTITY]][,tls-verify-peer=false]}: a virtual disk over
 * memory servers (docs/pool.md). A {@code tls-} key puts every link to a memory server under TLS, with libnbd's
 * meaning for each (its URI's user is the PSK identity: here {@code tls-username}).
 */
public final class PoolBackendFactory implements BackendFactory {
    private static final Logger log = LoggerFactory.getLogger(PoolBackendFactory.class);
    @Override public String kind() { return "pool"; }

    @Override
    public String usage() {
        return "pool:HOST:PORT,HOST:PORT,...,size=SIZE[,replicas=N][,extent=SIZE][,server-timeout=S][,recovery-rate=SIZE][,cache=SIZE][,readahead=SIZE]"
            + "[,tls-certificates=DIR|,tls-psk-file=FILE[,tls-username=ID]][,tls-verify-peer=false]";
    }

    @Override
    public Set<String> options() {
        return Set.of("size", "replicas", "extent", "client", "unit", "server-timeout", "recovery-rate", "candidates", "cache", "readahead",
            "tls-certificates", "tls-psk-file", "tls-username", "tls-verify-peer");
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
        PoolConfig config = config(target, options);
        if (config.tls() == null) {
            List<String> remote = config.servers().stream().filter(s -> !loopback(s)).toList();
            if (!remote.isEmpty()) {
                log.warn("pool: the links to memory servers {} are in plain text: anyone who can reach their ports can read, "
                    + "overwrite or fence this pool's data; use tls-psk-file= or tls-certificates= with memory servers "
                    + "under --tls require (docs/security.md)", String.join(", ", remote));
            }
        }
        return new PoolBackend(PoolVolume.open(config));
    }

    /** Whether a memory server's host is this machine's loopback; a name that does not resolve counts as remote. */
    private static boolean loopback(String hostPort) {
        try {
            return InetAddress.getByName(MemServerLink.parse(hostPort).getHostString()).isLoopbackAddress();
        } catch (UnknownHostException e) {
            return false;
        }
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
            o.integer("candidates", 1, 64, 2), o.size("cache", 0), o.size("readahead", 0), tls(o));
    }

    /** The links' TLS from the {@code tls-} keys, or null when there is none: the files must exist now. */
    static TlsClientSettings tls(BackendOptions o) {
        Path certificates = path(o, "tls-certificates");
        Path psk = path(o, "tls-psk-file");
        String user = o.string("tls-username", null);
        // A bare tls-verify-peer (a config file's "tls-verify-peer = true") means true.
        boolean bare = o.asMap().containsKey("tls-verify-peer") && o.asMap().get("tls-verify-peer") == null;
        String verify = bare ? "true" : o.choice("tls-verify-peer", "true", "true", "false");
        if (certificates == null && psk == null) {
            if (user != null || o.has("tls-verify-peer")) {
                throw new IllegalArgumentException("pool: tls-username and tls-verify-peer need tls-psk-file=FILE or tls-certificates=DIR");
            }
            return null;
        }
        if (certificates != null && psk != null) throw new IllegalArgumentException("pool: tls-certificates and tls-psk-file exclude each other");
        if (user != null && psk == null) throw new IllegalArgumentException("pool: tls-username is the PSK identity: it needs tls-psk-file=FILE");
        if (user != null && user.isEmpty()) throw new IllegalArgumentException("pool: tls-username must not be empty");
        return new TlsClientSettings(certificates, psk, user, verify.equals("true"), null);
    }

    private static Path path(BackendOptions o, String key) {
        String v = o.string(key, null);
        if (v == null) return null;
        Path p = Path.of(v);
        boolean dir = key.equals("tls-certificates");
        if (dir ? !Files.isDirectory(p) : !Files.isRegularFile(p)) {
            throw new IllegalArgumentException("pool: " + key + "=" + v + " is not a " + (dir ? "directory" : "file"));
        }
        return p;
    }
}
