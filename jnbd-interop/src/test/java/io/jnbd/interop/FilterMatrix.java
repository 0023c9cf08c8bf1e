package io.jnbd.interop;

import io.jnbd.server.backend.FilterFactories;
import java.util.List;

/**
 * The table {@link FilterMatrixInteropTest} runs: every filter (a row: its spec and the promise it makes to a
 * client) in front of every kind of backend. A new filter is one more row; its promise says which checks apply.
 */
final class FilterMatrix {

    private FilterMatrix() {}

    /** Every export of the matrix has this size. */
    static final long SIZE = 16L << 20;
    static final int MiB = 1 << 20;

    /** The bytes at [0, 1M) of a seeded export (the rest of it is seeded random data): what a qemu-io -P reads back. */
    static final int SEED_BYTE = 0x5e;

    /** {@link Promise#FAILS_IN_RANGE}'s range: [12M, 12M + 64K). */
    static final long RANGE_OFFSET = 12L << 20;
    static final long RANGE_LENGTH = 64L << 10;

    /** What a filter promises a client, and so what the clients check through it. */
    enum Promise {
        /** Every byte written reads back; the filter changes nothing a client can see but time. */
        TRANSPARENT,
        /** Writes fail (the client refuses them when it sees NBD_FLAG_READ_ONLY, the server with EPERM otherwise); reads return what is there. */
        READ_ONLY,
        /** Every write fails with ENOSPC; reads, write-zeroes and flushes work, and a failed write changes nothing. */
        WRITES_FAIL,
        /** Exactly the requests that touch [RANGE_OFFSET, RANGE_OFFSET + RANGE_LENGTH) fail with EIO, of any command. */
        FAILS_IN_RANGE;

        /** Whether the export must hold known data before the clients come (a client cannot write it through the filter). */
        boolean seeded() {
            return this == READ_ONLY || this == WRITES_FAIL;
        }
    }

    /**
     * One filter configuration: {@code name} names its exports, {@code filter} is the name {@code filter=} takes
     * (present in the build or not), {@code spec} what the export spec gets after the backend's part.
     */
    record Row(String name, String filter, String spec, Promise promise) {
        /** Whether this build has the filter: a row of a filter that has not landed is skipped, never passed. */
        boolean present() {
            return FilterFactories.of(filter) != null;
        }

        String export(Backend backend) {
            return name + "-" + backend.name;
        }
    }

    /** The filters under test, one row each. */
    static final List<Row> ROWS = List.of(
        new Row("readonly", "readonly", "filter=readonly", Promise.READ_ONLY),
        // Short delays on every command the clients send: the data must come through unchanged (no timing is checked).
        new Row("delay", "delay", "filter=delay,delay-read=1ms,delay-write=1ms,delay-zero=1ms,delay-trim=1ms,"
            + "delay-flush=1ms,delay-extents=1ms,delay-cache=1ms", Promise.TRANSPARENT),
        new Row("error-pwrite", "error", "filter=error,error=ENOSPC,error-pwrite-rate=100%", Promise.WRITES_FAIL),
        new Row("error-range", "error", "filter=error,error=EIO,error-rate=100%,error-offset=" + RANGE_OFFSET
            + ",error-length=" + RANGE_LENGTH, Promise.FAILS_IN_RANGE),
        // Enabled once the rate filter lands (until then present() is false and the row's tests are skipped): a limit
        // far above what the tests move, so it only has to pass the data through.
        new Row("rate", "rate", "filter=rate,rate=10G", Promise.TRANSPARENT),
        // Enabled once the cache filter lands: written-back and read-through caches must not change a byte.
        new Row("cache-writeback", "cache", "filter=cache,cache=writeback", Promise.TRANSPARENT),
        new Row("cache-on-read", "cache", "filter=cache,cache-on-read=true", Promise.TRANSPARENT));

    /** A kind of backend: {@code name} names the exports. */
    enum Backend {
        CACHED("cached"), DIRECT("direct"), MEMORY("memory"), POOL("pool"), NBD("nbd");

        final String name;

        Backend(String name) {
            this.name = name;
        }

        /** Whether the test can put data behind an export of it before the server opens it (a file, the upstream's file). */
        boolean preloadable() {
            return this == CACHED || this == DIRECT || this == NBD;
        }

        @Override
        public String toString() {
            return name;
        }
    }
}
