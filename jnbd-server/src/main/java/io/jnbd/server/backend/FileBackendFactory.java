package io.jnbd.server.backend;

import java.io.IOException;
import java.nio.file.Path;
import java.util.Set;

/** {@code file:PATH[,size=SIZE][,mode=cached|direct]}: a regular file or block device. */
public final class FileBackendFactory implements BackendFactory {
    @Override public String kind() { return "file"; }

    @Override public String usage() { return "file:PATH[,size=SIZE][,mode=cached|direct]"; }

    @Override public Set<String> options() { return Set.of("size", "mode"); }

    @Override
    public void check(String target, BackendOptions options) {
        if (target.isEmpty()) throw new IllegalArgumentException("file: needs a path");
        options.size("size", -1);
        mode(options);
    }

    @Override
    public Set<Backend.Trait> traits(String target, BackendOptions options) {
        return mode(options) == FileBackend.Mode.DIRECT ? Set.of(Backend.Trait.DIRECT_IO) : Set.of(Backend.Trait.ZERO_COPY, Backend.Trait.CACHED_READS);
    }

    @Override
    public Path imageFile(String target, BackendOptions options) {
        return Path.of(target);
    }

    @Override
    public Backend open(String target, BackendOptions options, boolean readOnly) throws IOException {
        return new FileBackend(Path.of(target), mode(options), readOnly, options.size("size", -1));
    }

    static FileBackend.Mode mode(BackendOptions options) {
        return options.choice("mode", "cached", "cached", "direct").equals("direct") ? FileBackend.Mode.DIRECT : FileBackend.Mode.CACHED;
    }
}
