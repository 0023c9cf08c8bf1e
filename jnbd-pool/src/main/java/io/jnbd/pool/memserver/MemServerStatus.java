package io.jnbd.pool.memserver;

import java.io.IOException;
import java.util.List;

/**
 * A memory server's state as its {@code status} export serves it (JSON), and as {@code jnbd pool status} and the
 * pool client read it back. A reader that may not see the clients ({@link MemServerAccess.StatusClients}) gets
 * none listed and their number in {@code moreClients}.
 */
public record MemServerStatus(String server, String incarnation, long uptimeSeconds, long ramBytes, long ramUsed,
                              long spillBytes, long spillUsed, long free, List<Client> clients, int moreClients) {

    /**
     * One pool client's space. {@code instanceFingerprint}: {@link SpaceName#fingerprint} of its instance (the
     * instance itself is the key to the space without TLS, so it is never shown). {@code owner}: the TLS identity
     * the space belongs to, null for none. {@code graceLeftSeconds}: when its last connection went, how long
     * until its data goes; else -1.
     */
    public record Client(int client, String instanceFingerprint, String owner, int connections, long bytes,
                         double graceLeftSeconds) {}

    public byte[] toJson() {
        return StatusJson.write(this);
    }

    /** Parses what the status export served: JSON, then padding. */
    public static MemServerStatus parse(byte[] bytes) throws IOException {
        return StatusJson.read(bytes, MemServerStatus.class);
    }
}
