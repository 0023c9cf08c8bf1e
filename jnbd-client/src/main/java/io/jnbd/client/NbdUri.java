package io.jnbd.client;

import io.jnbd.protocol.Nbd;
import io.jnbd.tls.TlsClientSettings;

import java.io.ByteArrayOutputStream;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.URI;
import java.net.UnixDomainSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Where an export lives, parsed from the URI forms that libnbd and QEMU share (the NBD URI specification):
 * {@code nbd://host[:port]/export} and {@code nbd+unix:///export?socket=PATH}, and their TLS forms
 * {@code nbds://} and {@code nbds+unix://}, which require TLS (STARTTLS) and take these query parameters:
 * <ul>
 *   <li>{@code tls-certificates=DIR}: {@code ca-cert.pem}, and {@code client-cert.pem} with {@code client-key.pem}
 *       for servers that check clients (libnbd's layout); without it the JDK's default trust store is used</li>
 *   <li>{@code tls-psk-file=FILE}: use a pre-shared key (psktool's {@code identity:hexkey} lines) instead of
 *       X.509; the URI's user ({@code nbds://alice@host/}) picks the identity, else the file's first line</li>
 *   <li>{@code tls-verify-peer=false}: accept any server certificate (default true: the chain must lead to the CA
 *       and name the host)</li>
 *   <li>{@code tls-hostname=NAME}: the name the server's certificate must carry, instead of the URI's host. An
 *       {@code nbds+unix} URI has no host: without this parameter the certificate is not verified, as libnbd
 *       does</li>
 * </ul>
 *
 * @param uri        the URI as given, for messages
 * @param address    the socket address to connect to (TCP or Unix domain)
 * @param exportName the export name; empty selects the server's default export
 * @param tls        the TLS the URI asks for ({@code nbds}), or null for a plain connection
 */
public record NbdUri(URI uri, SocketAddress address, String exportName, TlsClientSettings tls) {

    /** A URI of a plain connection. */
    public NbdUri(URI uri, SocketAddress address, String exportName) {
        this(uri, address, exportName, null);
    }

    private static final List<String> TLS_PARAMETERS =
        List.of("tls-certificates", "tls-psk-file", "tls-verify-peer", "tls-hostname", "tls-type");

    /** Parses {@code text}, throwing {@link IllegalArgumentException} with a one-line reason when it is not an NBD URI. */
    public static NbdUri parse(String text) {
        URI uri;
        try {
            uri = new URI(text);
        } catch (java.net.URISyntaxException e) {
            throw new IllegalArgumentException("not a valid URI: " + text + " (" + e.getReason() + ")");
        }
        return parse(uri);
    }

    public static NbdUri parse(URI uri) {
        String scheme = uri.getScheme();
        if (scheme == null) {
            throw new IllegalArgumentException("not an NBD URI (no scheme): " + uri
                + "; expected nbd[s]://host[:port]/export or nbd[s]+unix:///export?socket=PATH");
        }
        String export = exportFromPath(uri);
        Map<String, String> query = query(uri);
        return switch (scheme.toLowerCase(Locale.ROOT)) {
            case "nbd", "nbd+tcp", "nbds", "nbds+tcp" -> {
                String host = uri.getHost();
                if (host == null || host.isEmpty()) {
                    throw new IllegalArgumentException("NBD URI has no host: " + uri);
                }
                if (host.startsWith("[") && host.endsWith("]")) host = host.substring(1, host.length() - 1);
                int port = uri.getPort() == -1 ? Nbd.DEFAULT_PORT : uri.getPort();
                yield new NbdUri(uri, new InetSocketAddress(host, port), export, tls(uri, scheme, query, host));
            }
            case "nbd+unix", "nbds+unix" -> {
                String socket = query.get("socket");
                if (socket == null || socket.isEmpty()) {
                    throw new IllegalArgumentException(scheme + " URI needs ?socket=PATH: " + uri);
                }
                yield new NbdUri(uri, UnixDomainSocketAddress.of(Path.of(socket)), export, tls(uri, scheme, query, null));
            }
            default -> throw new IllegalArgumentException("unsupported URI scheme '" + scheme + "' in " + uri
                + "; expected nbd://, nbds://, nbd+unix:// or nbds+unix://");
        };
    }

    /** True if {@code text} looks like a URI rather than a local path; the tools use it to tell the two apart. */
    public static boolean looksLikeUri(String text) {
        return text.matches("^[A-Za-z][A-Za-z0-9+.-]*://.*");
    }

    /** The same server and TLS settings, another export. */
    public NbdUri withExport(String name) {
        return new NbdUri(uri, address, name, tls);
    }

    /**
     * The TLS settings of an {@code nbds} URI; null for a plain one, where any tls- parameter is an error rather
     * than silently ignored (it would suggest a protection that is not there).
     */
    private static TlsClientSettings tls(URI uri, String scheme, Map<String, String> query, String host) {
        boolean wanted = scheme.toLowerCase(Locale.ROOT).startsWith("nbds");
        for (String key : query.keySet()) {
            if (!key.startsWith("tls-")) continue;
            if (!wanted) {
                throw new IllegalArgumentException(key + " needs a TLS URI (nbds:// or nbds+unix://): " + uri);
            }
            if (!TLS_PARAMETERS.contains(key)) {
                throw new IllegalArgumentException("unknown TLS parameter '" + key + "' in " + uri
                    + "; known: " + String.join(", ", TLS_PARAMETERS));
            }
        }
        if (!wanted) return null;
        Path certificates = path(query, "tls-certificates", uri);
        Path pskFile = path(query, "tls-psk-file", uri);
        String type = query.get("tls-type");
        if (type != null) {
            // The NBD URI specification's tls-type only restates what the other parameters decide; check it agrees.
            switch (type.toLowerCase(Locale.ROOT)) {
                case "x509" -> {
                    if (pskFile != null) throw new IllegalArgumentException("tls-type=x509 with tls-psk-file in " + uri);
                }
                case "psk" -> {
                    if (pskFile == null) throw new IllegalArgumentException("tls-type=psk needs tls-psk-file=FILE in " + uri);
                }
                case "anon" -> throw new IllegalArgumentException("anonymous TLS (tls-type=anon) is not supported: " + uri);
                default -> throw new IllegalArgumentException("tls-type must be x509 or psk, not '" + type + "': " + uri);
            }
        }
        String hostname = query.get("tls-hostname");
        if (hostname != null && hostname.isEmpty()) throw new IllegalArgumentException("empty tls-hostname in " + uri);
        String serverName = hostname != null ? hostname : host;
        Boolean verify = bool(query, "tls-verify-peer", uri);
        if (serverName == null && Boolean.TRUE.equals(verify)) {
            throw new IllegalArgumentException("tls-verify-peer=true needs tls-hostname=NAME on a Unix socket, which has"
                + " no host name to check the server's certificate against: " + uri);
        }
        // As libnbd: without a name to check (nbds+unix), the server's certificate is not verified.
        boolean verifyPeer = serverName != null && (verify == null || verify);
        return new TlsClientSettings(certificates, pskFile, user(uri), verifyPeer, serverName);
    }

    /** The user of {@code user@host}, or of libnbd's {@code nbds+unix://user@/?socket=...}; null if none. */
    private static String user(URI uri) {
        String user = uri.getUserInfo();
        if (user == null && uri.getRawAuthority() != null) {
            // With no host after the '@', java.net.URI sees a registry-based authority and reports no user.
            String authority = uri.getRawAuthority();
            int at = authority.lastIndexOf('@');
            if (at >= 0) user = decode(authority.substring(0, at));
        }
        return user == null || user.isEmpty() ? null : user;
    }

    private static Path path(Map<String, String> query, String key, URI uri) {
        String value = query.get(key);
        if (value == null) return null;
        if (value.isEmpty()) throw new IllegalArgumentException(key + " is empty in " + uri);
        return Path.of(value);
    }

    /** The parameter's value, or null when absent. */
    private static Boolean bool(Map<String, String> query, String key, URI uri) {
        String value = query.get(key);
        if (value == null) return null;
        return switch (value.toLowerCase(Locale.ROOT)) {
            case "1", "true", "yes", "on" -> true;
            case "0", "false", "no", "off" -> false;
            default -> throw new IllegalArgumentException(key + " must be true or false (1 or 0), not '" + value
                + "': " + uri);
        };
    }

    private static String exportFromPath(URI uri) {
        String path = uri.getPath();
        if (path == null || path.isEmpty()) return "";
        return path.startsWith("/") ? path.substring(1) : path;
    }

    /** The query's parameters, percent-decoded one by one, so that an encoded '&' or '=' stays in its value. */
    private static Map<String, String> query(URI uri) {
        Map<String, String> parameters = new LinkedHashMap<>();
        String raw = uri.getRawQuery();
        if (raw == null || raw.isEmpty()) return parameters;
        for (String pair : raw.split("&")) {
            if (pair.isEmpty()) continue;
            int eq = pair.indexOf('=');
            String key = decode(eq < 0 ? pair : pair.substring(0, eq));
            // As libnbd: the last of repeated parameters counts.
            parameters.put(key, eq < 0 ? "" : decode(pair.substring(eq + 1)));
        }
        return parameters;
    }

    private static String decode(String s) {
        if (s.indexOf('%') < 0) return s;
        ByteArrayOutputStream out = new ByteArrayOutputStream(s.length());
        for (int i = 0; i < s.length(); ) {
            if (s.charAt(i) == '%') {
                // java.net.URI has already checked that every '%' starts a two-digit escape.
                out.write(Integer.parseInt(s, i + 1, i + 3, 16));
                i += 3;
            } else {
                int next = s.indexOf('%', i);
                if (next < 0) next = s.length();
                out.writeBytes(s.substring(i, next).getBytes(StandardCharsets.UTF_8));
                i = next;
            }
        }
        return out.toString(StandardCharsets.UTF_8);
    }

    @Override
    public String toString() {
        return uri.toString();
    }
}
