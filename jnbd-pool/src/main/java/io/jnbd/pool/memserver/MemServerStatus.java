package io.jnbd.pool.memserver;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.PropertyNamingStrategies;
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

    private static final ObjectMapper JSON = new ObjectMapper()
        .setPropertyNamingStrategy(PropertyNamingStrategies.SNAKE_CASE)
        .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

    public byte[] toJson() {
        try {
            return JSON.writerWithDefaultPrettyPrinter().writeValueAsBytes(this);
        } catch (IOException e) {
            throw new IllegalStateException("a status record that does not serialise", e);
        }
    }

    /** Parses what the status export served: JSON, then padding. */
    public static MemServerStatus parse(byte[] bytes) throws IOException {
        int end = bytes.length;
        while (end > 0 && (bytes[end - 1] == 0 || bytes[end - 1] == ' ' || bytes[end - 1] == '\n')) end--;
        return JSON.readValue(bytes, 0, end, MemServerStatus.class);
    }
}
