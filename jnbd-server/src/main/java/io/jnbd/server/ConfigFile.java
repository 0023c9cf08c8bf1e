package io.jnbd.server;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The {@code --config} file: the command line's options, one per line.
 *
 * <pre>
 * # comments and blank lines are ignored
 * listen = 127.0.0.1:10809
 * unix = /run/jnbd.sock
 * default-export = disk
 * export disk = file:/var/lib/vm.img,mode=direct
 * export scratch = memory:4G,description=Scratch space
 * receive-timeout = 30
 * backlog = 4096
 * tls = require
 * tls-certificates = /etc/pki/jnbd
 * tls-verify-peer = true
 * tls-psk = /etc/jnbd/keys.psk
 * </pre>
 *
 * Settings the file does not set are null (false for {@code tlsVerifyPeer}): the command line or the default decides.
 */
public record ConfigFile(List<String> listen, List<String> unix, List<ExportSpec> exports, String defaultExport,
                         Integer receiveTimeout, Integer backlog, ServerTls.Mode tls, Path tlsCertificates,
                         Boolean tlsVerifyPeer, Path tlsPsk) {

    public static ConfigFile read(Path path) throws IOException {
        List<String> listen = new ArrayList<>(), unix = new ArrayList<>();
        List<ExportSpec> exports = new ArrayList<>();
        String defaultExport = null;
        Integer receiveTimeout = null, backlog = null;
        ServerTls.Mode tls = null;
        Path tlsCertificates = null, tlsPsk = null;
        Boolean tlsVerifyPeer = null;
        int n = 0;
        for (String raw : Files.readAllLines(path)) {
            n++;
            String line = raw.strip();
            if (line.isEmpty() || line.startsWith("#")) continue;
            int eq = line.indexOf('=');
            if (eq < 0) throw new IllegalArgumentException(path + ":" + n + ": expected KEY = VALUE");
            String key = line.substring(0, eq).strip();
            String value = line.substring(eq + 1).strip();
            try {
                if (key.startsWith("export ")) {
                    exports.add(ExportSpec.parse(key.substring("export ".length()).strip(), value));
                } else {
                    switch (key) {
                        case "listen" -> listen.add(value);
                        case "unix" -> unix.add(value);
                        case "default-export" -> defaultExport = value;
                        case "receive-timeout" -> receiveTimeout = positive(key, value);
                        case "backlog" -> backlog = positive(key, value);
                        case "tls" -> tls = mode(key, value);
                        case "tls-certificates" -> tlsCertificates = path(key, value);
                        case "tls-verify-peer" -> tlsVerifyPeer = bool(key, value);
                        case "tls-psk" -> tlsPsk = path(key, value);
                        default -> throw new IllegalArgumentException("unknown setting '" + key + "'");
                    }
                }
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(path + ":" + n + ": " + e.getMessage());
            }
        }
        return new ConfigFile(listen, unix, exports, defaultExport, receiveTimeout, backlog, tls, tlsCertificates,
            tlsVerifyPeer, tlsPsk);
    }

    private static Path path(String key, String value) {
        if (value.isEmpty()) throw new IllegalArgumentException(key + " needs a path");
        return Path.of(value);
    }

    private static boolean bool(String key, String value) {
        return switch (value) {
            case "true" -> true;
            case "false" -> false;
            default -> throw new IllegalArgumentException(key + " must be true or false, not '" + value + "'");
        };
    }

    private static ServerTls.Mode mode(String key, String value) {
        try {
            return ServerTls.parseMode(value);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(key + " " + e.getMessage());
        }
    }

    private static int positive(String key, String value) {
        try {
            int v = Integer.parseInt(value);
            if (v > 0) return v;
        } catch (NumberFormatException e) {
            // the message below says what is wanted
        }
        throw new IllegalArgumentException(key + " must be a whole number of at least 1, not '" + value + "'");
    }
}
