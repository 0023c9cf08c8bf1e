package io.jnbd.server;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import java.io.IOException;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One chain's hold on a backend that several chains may stand on: a reload that changes an export's filters builds a
 * new chain over the same backend while connections still use the old one, and whichever chain is closed last
 * closes the backend. Under every chain {@link ExportSet} builds; it changes nothing that passes.
 */
final class SharedBackend extends FilterBackend {
    private final AtomicInteger holds;
    private final AtomicInteger closed = new AtomicInteger();

    SharedBackend(Backend backend) {
        this(backend, new AtomicInteger(1));
    }

    private SharedBackend(Backend backend, AtomicInteger holds) {
        super(backend);
        this.holds = holds;
    }

    /** Another hold on the same backend, for a new chain. */
    SharedBackend another() {
        holds.incrementAndGet();
        return new SharedBackend(inner, holds);
    }

    /** Every one: requests reach the backend unchanged whichever path they take. */
    @Override public Set<Trait> traits() { return inner.traits(); }

    /** Gives up this hold (once, however often it is called); the last closes the backend. */
    @Override
    public void close() throws IOException {
        if (closed.getAndIncrement() == 0 && holds.decrementAndGet() == 0) inner.close();
    }
}
