package io.jnbd.server.filter;

import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.EnumSet;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A memory backend that counts the calls reaching it and outlives the filters in front of it (their close leaves it
 * open), so a test can look at its bytes after a cache has written back; capabilities and traits as a test sets them.
 */
final class CountingBackend extends FilterBackend {
    final AtomicInteger reads = new AtomicInteger(), writes = new AtomicInteger(), flushes = new AtomicInteger();
    final AtomicInteger zeroes = new AtomicInteger(), trims = new AtomicInteger(), closes = new AtomicInteger();
    private final Set<Capability> capabilities;
    private final Set<Trait> traits;

    CountingBackend(long size) {
        this(size, EnumSet.allOf(Capability.class), Set.of());
    }

    CountingBackend(long size, Set<Capability> capabilities, Set<Trait> traits) {
        super(new MemoryBackend(size));
        this.capabilities = Set.copyOf(capabilities);
        this.traits = Set.copyOf(traits);
    }

    @Override public Set<Capability> capabilities() { return capabilities; }
    @Override public Set<Trait> traits() { return traits; }

    @Override
    public void read(long offset, ByteBuffer dst) throws IOException {
        reads.incrementAndGet();
        inner.read(offset, dst);
    }

    @Override
    public void write(long offset, ByteBuffer src, boolean fua) throws IOException {
        writes.incrementAndGet();
        inner.write(offset, src, fua);
    }

    @Override
    public void flush() throws IOException {
        flushes.incrementAndGet();
        inner.flush();
    }

    @Override
    public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) throws IOException {
        zeroes.incrementAndGet();
        inner.zero(offset, length, mayTrim, fast, fua);
    }

    @Override
    public void trim(long offset, long length, boolean fua) throws IOException {
        trims.incrementAndGet();
        inner.trim(offset, length, fua);
    }

    /** The bytes as the backend itself has them, bypassing every filter. */
    byte[] bytes(long offset, int length) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(length);
        inner.read(offset, b);
        return b.array();
    }

    @Override
    public void close() {
        closes.incrementAndGet();
    }

    /** The memory behind it, for real. */
    void release() throws IOException {
        inner.close();
    }
}
