package io.jnbd.pool;

import java.io.IOException;

/** A pool request that failed, with the NBD error its client should see (EIO or ENOSPC). */
public final class PoolException extends IOException {
    private final int error;

    public PoolException(int error, String message) {
        super(message);
        this.error = error;
    }

    public int error() {
        return error;
    }
}
