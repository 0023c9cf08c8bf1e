package io.jnbd.server.backend;

import java.nio.ByteBuffer;
import java.util.Set;

/**
 * A backend kind that exists only on the test class path, registered in the tests' own
 * {@code META-INF/services}: {@code pattern:SIZE[,byte=N]}, read-only, every byte N. It shows that a kind plugs
 * in without the server knowing it.
 */
public final class PatternBackendFactory implements BackendFactory {
    @Override public String kind() { return "pattern"; }
    @Override public String usage() { return "pattern:SIZE[,byte=N]"; }
    @Override public Set<String> options() { return Set.of("byte"); }

    @Override
    public void check(String target, BackendOptions options) {
        BackendOptions.parseSize(target);
        options.integer("byte", 0, 255, 0);
    }

    @Override
    public Set<Backend.Trait> traits(String target, BackendOptions options) {
        return Set.of(Backend.Trait.NEVER_BLOCKS);
    }

    @Override
    public Backend open(String target, BackendOptions options, boolean readOnly) {
        long size = BackendOptions.parseSize(target);
        byte value = (byte) options.integer("byte", 0, 255, 0);
        return new Backend() {
            @Override public long size() { return size; }
            @Override public Set<Capability> capabilities() { return Set.of(Capability.MULTI_CONN); }
            @Override public Set<Trait> traits() { return Set.of(Trait.NEVER_BLOCKS); }
            @Override public void read(long offset, ByteBuffer dst) { while (dst.hasRemaining()) dst.put(value); }
            @Override public void write(long offset, ByteBuffer src, boolean fua) { throw new UnsupportedOperationException(); }
            @Override public void flush() {}
            @Override public void trim(long offset, long length, boolean fua) {}
            @Override public void zero(long offset, long length, boolean mayTrim, boolean fast, boolean fua) {}
            @Override public String describe() { return "pattern " + value; }
            @Override public void close() {}
        };
    }
}
