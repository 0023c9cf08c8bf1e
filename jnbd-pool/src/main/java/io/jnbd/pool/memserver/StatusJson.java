package io.jnbd.pool.memserver;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.PropertyNamingStrategies;
import java.io.IOException;

/**
 * The JSON of the status documents (a memory server's, a pool's): snake_case names, unknown fields ignored so
 * that an older reader takes a newer server's document, and the padding a status export serves after it.
 */
public final class StatusJson {
    private static final ObjectMapper JSON = new ObjectMapper()
        .setPropertyNamingStrategy(PropertyNamingStrategies.SNAKE_CASE)
        .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

    private StatusJson() {
    }

    public static byte[] write(Record status) {
        try {
            return JSON.writerWithDefaultPrettyPrinter().writeValueAsBytes(status);
        } catch (IOException e) {
            throw new IllegalStateException("a status record that does not serialise", e);
        }
    }

    /** Parses what a status export served: JSON, then padding (zeroes, spaces, newlines). */
    public static <T extends Record> T read(byte[] bytes, Class<T> type) throws IOException {
        int end = bytes.length;
        while (end > 0 && (bytes[end - 1] == 0 || bytes[end - 1] == ' ' || bytes[end - 1] == '\n')) end--;
        return JSON.readValue(bytes, 0, end, type);
    }
}
