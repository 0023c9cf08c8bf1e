package io.jnbd.pool.memserver;

import java.io.IOException;
import java.util.List;

/**
 * A memory server's state as its {@code status} export serves it (JSON), and as {@code jnbd pool status} and the
 * pool client read it back.
 */
public record MemServerStatus(String server, String incarnation, long uptimeSeconds, long ramBytes, long ramUsed,
                              long spillBytes, long spillUsed, long free, List<Client> clients, int moreClients) {

    /** One pool client's space. {@code graceLeftSeconds}: when its last connection went, how long until its data goes; else -1. */
    public record Client(int client, String instance, int connections, long bytes, double graceLeftSeconds) {}

    public byte[] toJson() {
        return StatusJson.write(this);
    }

    /** Parses what the status export served: JSON, then padding. */
    public static MemServerStatus parse(byte[] bytes) throws IOException {
        return StatusJson.read(bytes, MemServerStatus.class);
    }
}
