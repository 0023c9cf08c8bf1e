package io.jnbd.pool.memserver;

import io.jnbd.server.AllowList;
import io.jnbd.server.Client;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * Who may use a memory server, and who sees its clients in the {@code status} export.
 *
 * @param allow         who may connect at all: address ranges and TLS identities ({@code --allow}, as
 *                      {@code jnbd serve}'s {@code allow=}); {@link AllowList#ANYONE} for everyone
 * @param statusClients who sees the list of clients (their ids, instance fingerprints and sizes) in the status
 *                      export; everyone else sees the server's own figures only, which is what a pool client needs
 */
public record MemServerAccess(AllowList allow, StatusClients statusClients) {

    /** Everyone may connect; only TLS-authenticated clients see the clients. */
    public static final MemServerAccess DEFAULT = new MemServerAccess(AllowList.ANYONE, StatusClients.AUTHENTICATED);

    /** Everyone may connect and see the clients: for tests and trusted networks. */
    public static final MemServerAccess OPEN = new MemServerAccess(AllowList.ANYONE, StatusClients.ANYONE);

    /**
     * Who sees the clients in the status export: {@code anyone}, {@code authenticated} (any client with a TLS
     * identity), or the administrator identities named ({@code alice;ops}), compared exactly.
     */
    public record StatusClients(boolean anyone, boolean authenticated, Set<String> admins) {
        public static final StatusClients ANYONE = new StatusClients(true, false, Set.of());
        public static final StatusClients AUTHENTICATED = new StatusClients(false, true, Set.of());

        public StatusClients {
            admins = Set.copyOf(admins);
        }

        /** {@code anyone}, {@code authenticated}, or {@code IDENTITY[;IDENTITY...]}; the message is meant for the user. */
        public static StatusClients parse(String text) {
            String t = text.strip();
            switch (t.toLowerCase(Locale.ROOT)) {
                case "anyone" -> { return ANYONE; }
                case "authenticated" -> { return AUTHENTICATED; }
                default -> {
                    List<String> ids = Arrays.stream(t.split(";", -1)).map(String::strip).toList();
                    if (ids.stream().anyMatch(String::isEmpty)) {
                        throw new IllegalArgumentException("must be anyone, authenticated, or administrator identities separated by ';', not '" + text + "'");
                    }
                    return new StatusClients(false, false, Set.copyOf(ids));
                }
            }
        }

        public boolean admits(Client client) {
            if (anyone) return true;
            if (authenticated) return !client.identities().isEmpty();
            return client.identities().stream().anyMatch(admins::contains);
        }

        @Override
        public String toString() {
            return anyone ? "anyone" : authenticated ? "authenticated" : String.join(";", admins.stream().sorted().toList());
        }
    }
}
