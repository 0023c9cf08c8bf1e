package io.jnbd.client;

import io.jnbd.protocol.Nbd;

import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.URI;
import java.net.UnixDomainSocketAddress;
import java.nio.file.Path;

/**
 * Where an export lives, parsed from the URI forms that libnbd and QEMU share:
 * {@code nbd://host[:port]/export} and {@code nbd+unix:///export?socket=PATH}.
 *
 * @param uri        the URI as given, for messages
 * @param address    the socket address to connect to (TCP or Unix domain)
 * @param exportName the export name; empty selects the server's default export
 */
public record NbdUri(URI uri, SocketAddress address, String exportName) {

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
                + "; expected nbd://host[:port]/export or nbd+unix:///export?socket=PATH");
        }
        String export = exportFromPath(uri);
        return switch (scheme.toLowerCase(java.util.Locale.ROOT)) {
            case "nbd", "nbd+tcp" -> {
                String host = uri.getHost();
                if (host == null || host.isEmpty()) {
                    throw new IllegalArgumentException("NBD URI has no host: " + uri);
                }
                if (host.startsWith("[") && host.endsWith("]")) host = host.substring(1, host.length() - 1);
                int port = uri.getPort() == -1 ? Nbd.DEFAULT_PORT : uri.getPort();
                yield new NbdUri(uri, new InetSocketAddress(host, port), export);
            }
            case "nbd+unix" -> {
                String socket = queryParameter(uri, "socket");
                if (socket == null || socket.isEmpty()) {
                    throw new IllegalArgumentException("nbd+unix URI needs ?socket=PATH: " + uri);
                }
                yield new NbdUri(uri, UnixDomainSocketAddress.of(Path.of(socket)), export);
            }
            case "nbds", "nbds+unix", "nbds+tcp" ->
                throw new IllegalArgumentException("TLS (" + scheme + "://) is not supported yet: " + uri);
            default -> throw new IllegalArgumentException("unsupported URI scheme '" + scheme + "' in " + uri
                + "; expected nbd:// or nbd+unix://");
        };
    }

    /** True if {@code text} looks like a URI rather than a local path; the tools use it to tell the two apart. */
    public static boolean looksLikeUri(String text) {
        return text.matches("^[A-Za-z][A-Za-z0-9+.-]*://.*");
    }

    private static String exportFromPath(URI uri) {
        String path = uri.getPath();
        if (path == null || path.isEmpty()) return "";
        return path.startsWith("/") ? path.substring(1) : path;
    }

    private static String queryParameter(URI uri, String name) {
        String query = uri.getQuery();
        if (query == null) return null;
        for (String pair : query.split("&")) {
            int eq = pair.indexOf('=');
            String key = eq < 0 ? pair : pair.substring(0, eq);
            if (key.equals(name)) return eq < 0 ? "" : pair.substring(eq + 1);
        }
        return null;
    }

    @Override
    public String toString() {
        return uri.toString();
    }
}
