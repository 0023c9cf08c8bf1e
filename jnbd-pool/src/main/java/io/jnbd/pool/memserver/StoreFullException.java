package io.jnbd.pool.memserver;

import java.io.IOException;

/**
 * A write needed pages that the store would not give: either RAM and spill are both full, or the writing
 * client already holds as much as its quota allows. The write that failed changed nothing.
 */
public final class StoreFullException extends IOException {
    /** Which limit refused the pages: the NBD layer answers ENOSPC either way, but logs and status differ. */
    public enum Limit {
        /** RAM and spill together hold as many pages as they can. */
        CAPACITY,
        /** The client would hold more than its quota in both tiers together. */
        CLIENT_QUOTA
    }

    private final Limit limit;
    private final int client;

    StoreFullException(Limit limit, int client, String message) {
        super(message);
        this.limit = limit;
        this.client = client;
    }

    public Limit limit() {
        return limit;
    }

    /** The client whose write was refused. */
    public int client() {
        return client;
    }
}
