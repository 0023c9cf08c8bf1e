package io.jnbd.server.backend;

import java.util.List;

/**
 * A backend whose export also answers to {@code EXPORT/NAME}, each NAME a view of its own that
 * {@link Backend#forConnection} hands a connection that asked for it (the cow filter's overlay of each client). The
 * registry finds it along the export's chain ({@link FilterBackend#find}) and asks it before the client gets the export.
 */
public interface NamedViews {
    /**
     * Why a client with TLS {@code identities} may not have the view {@code name} (null: the export's name alone), or
     * null when it may. A one-line message for the client ({@code NBD_REP_ERR_POLICY}) and the log.
     */
    String refusal(String name, List<String> identities);

    /** Whether view {@code name} (one {@link #refusal} let through) is read-only: the client is told so at NBD_OPT_GO. */
    default boolean readOnly(String name) {
        return false;
    }
}
