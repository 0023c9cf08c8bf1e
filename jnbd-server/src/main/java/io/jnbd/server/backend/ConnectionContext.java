package io.jnbd.server.backend;

import java.util.List;

/**
 * Who a connection is, as {@link Backend#forConnection} is told when the connection's transmission phase begins.
 *
 * @param name       what the client asked for after the export's name and a {@code /} ({@code pc42} of {@code boot/pc42},
 *                   for an export that takes such names: see {@link NamedViews}), or null when it named the export alone
 * @param identities the identities its TLS session proved (PSK identity, or the names in its certificate), empty without
 * @param peer       where it connects from, for log lines
 */
public record ConnectionContext(String name, List<String> identities, String peer) {
    /** A connection with no name after the export's, no TLS identity and no known peer (tests, tools). */
    public static final ConnectionContext NONE = new ConnectionContext(null, List.of(), "");

    public ConnectionContext {
        identities = List.copyOf(identities);
        peer = peer == null ? "" : peer;
    }
}
