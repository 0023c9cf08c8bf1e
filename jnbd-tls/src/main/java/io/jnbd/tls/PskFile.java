package io.jnbd.tls;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SequencedMap;

/**
 * A psktool key file: {@code identity:hexkey} lines, blank lines skipped. The order is kept, since a client
 * without an identity of its own uses the first line.
 */
record PskFile(Path path, SequencedMap<String, byte[]> keys) {

    static PskFile load(Path path) throws TlsConfigException {
        List<String> lines;
        try {
            lines = Files.readAllLines(path, StandardCharsets.UTF_8);
        } catch (NoSuchFileException e) {
            throw new TlsConfigException(path + ": no such file");
        } catch (IOException e) {
            throw new TlsConfigException(path + ": cannot read it: " + Pem.oneLine(e), e);
        }
        SequencedMap<String, byte[]> keys = new LinkedHashMap<>();
        for (int i = 0; i < lines.size(); i++) {
            String line = lines.get(i).strip();
            if (line.isEmpty()) continue;
            // A hex key never holds ':', so the last one separates even an identity that contains one.
            int colon = line.lastIndexOf(':');
            String where = path + " line " + (i + 1);
            if (colon <= 0 || colon == line.length() - 1) {
                throw new TlsConfigException(where + ": expected identity:hexkey (as psktool writes)");
            }
            String identity = line.substring(0, colon);
            byte[] key;
            try {
                key = HexFormat.of().parseHex(line.substring(colon + 1));
            } catch (IllegalArgumentException e) {
                throw new TlsConfigException(where + ": the key of '" + identity + "' is not an even number of hex digits");
            }
            if (keys.putIfAbsent(identity, key) != null) {
                throw new TlsConfigException(where + ": identity '" + identity + "' appears twice");
            }
        }
        if (keys.isEmpty()) throw new TlsConfigException(path + ": no identity:hexkey line in it");
        return new PskFile(path, keys);
    }

    byte[] key(String identity) {
        return keys.get(identity);
    }

    Map.Entry<String, byte[]> first() {
        return keys.firstEntry();
    }
}
