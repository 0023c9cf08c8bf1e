package io.jnbd.server.backend;

import java.util.Set;

/** {@code memory:SIZE}: a sparse RAM disk that lives as long as the server. */
public final class MemoryBackendFactory implements BackendFactory {
    @Override public String kind() { return "memory"; }

    @Override public String usage() { return "memory:SIZE"; }

    // size and mode are not memory options; they are taken only to say what to write instead.
    @Override public Set<String> options() { return Set.of("size", "mode"); }

    @Override
    public void check(String target, BackendOptions options) {
        if (options.has("size")) throw new IllegalArgumentException("give a memory export's size as memory:SIZE");
        if (options.has("mode")) throw new IllegalArgumentException("mode=" + options.asMap().get("mode") + " applies to files only");
        if (size(target) == 0) throw new IllegalArgumentException("size must be positive");
    }

    @Override
    public Set<Backend.Trait> traits(String target, BackendOptions options) {
        return Set.of(Backend.Trait.NEVER_BLOCKS);
    }

    @Override
    public Backend open(String target, BackendOptions options, boolean readOnly) {
        return new MemoryBackend(size(target));
    }

    private static long size(String target) {
        return BackendOptions.parseSize(target.isEmpty() ? null : target);
    }
}
