package io.jnbd.server;

import java.util.Collection;

/**
 * Where the server finds the export a client names. {@link Exports} is the fixed set a command line gives; a
 * memory server makes a client's space when the client first asks for it, and learns from
 * {@link #attached}/{@link #detached} when the client's last connection is gone.
 */
public interface ExportRegistry {

    /** The export called {@code name} (the empty name: the default one), or null if there is none. */
    Export find(String name) throws Refused;

    /**
     * {@code name} as log lines and error messages show it. A registry whose names carry a secret (a memory
     * server's space names hold the pool client's instance) shows them without it.
     */
    default String shown(String name) {
        return name;
    }

    /** What {@code NBD_OPT_LIST} shows. */
    Collection<Export> listed();

    /**
     * The export called {@code name} as {@code client} may have it: {@link Refused} when the export's access
     * list does not admit the client. Without access lists, {@link #find(String)}.
     */
    default Export find(String name, Client client) throws Refused {
        return find(name);
    }

    /** What {@code NBD_OPT_LIST} shows {@code client}: only the exports it may open. */
    default Collection<Export> listed(Client client) {
        return listed();
    }

    /** Every export open now. */
    Collection<Export> all();

    /**
     * The server is stopping and its connections are over: every export still open, for the server to flush and
     * close. A registry that closes exports itself (one a reload replaced) closes none from now on.
     */
    default Collection<Export> stop() {
        return all();
    }

    /** A connection from {@code peer} has entered the transmission phase on {@code export}. */
    default void attached(Export export, String peer) {}

    /** That connection has ended; every request it read has been answered. */
    default void detached(Export export, String peer) {}

    /**
     * Asks to be told each name that no export carries any more (its last export of that name closed), so that
     * what is kept by name, such as metric series, can go too. A registry whose exports never go never calls it.
     */
    default void whenGone(java.util.function.Consumer<String> listener) {}

    /**
     * The export exists but this client may not have it; the message says why ({@code NBD_REP_ERR_POLICY}).
     * {@link #tlsMayAdmit}: a client without TLS might be admitted once it has it ({@code NBD_REP_ERR_TLS_REQD}).
     */
    final class Refused extends Exception {
        private final boolean tlsMayAdmit;

        public Refused(String message) {
            this(message, false);
        }

        public Refused(String message, boolean tlsMayAdmit) {
            super(message, null, false, false);
            this.tlsMayAdmit = tlsMayAdmit;
        }

        public boolean tlsMayAdmit() {
            return tlsMayAdmit;
        }
    }
}
