package io.jnbd.server.backend;

import java.io.IOException;
import java.util.Set;

/**
 * Opens the backends of one kind, as an export spec names them: {@code KIND:TARGET[,option...]}. Kinds are
 * found with {@link java.util.ServiceLoader} (see {@link BackendFactories}), so a module adds one by listing
 * its factory in {@code META-INF/services/io.jnbd.server.backend.BackendFactory}; nothing central changes.
 */
public interface BackendFactory {
    /** What comes before the colon, in lower case: {@code file}, {@code memory}, {@code pool}. */
    String kind();

    /** How a spec of this kind is written, for help texts: {@code file:PATH[,size=SIZE][,mode=cached|direct]}. */
    String usage();

    /** The option keys this kind takes (the export-wide ones such as readonly and split are not among them). */
    Set<String> options();

    /**
     * Whether a comma-separated part without {@code =} continues the target rather than being an option: the
     * pool's target is a list of servers, {@code pool:HOST:PORT,HOST:PORT,...}.
     */
    default boolean continuesTarget(String part) {
        return false;
    }

    /**
     * Checks the target and options now, so that a bad spec fails when it is read rather than when it is
     * opened; the message is meant for the user as it is.
     */
    void check(String target, BackendOptions options);

    /** The traits the backend will have, known before it is opened (an export's tuning defaults follow them). */
    Set<Backend.Trait> traits(String target, BackendOptions options);

    /**
     * The file whose bytes a backend of this spec serves, or null for a kind without one (memory, another server): where
     * a filter with files of its own may keep them by default, beside the image.
     */
    default java.nio.file.Path imageFile(String target, BackendOptions options) {
        return null;
    }

    Backend open(String target, BackendOptions options, boolean readOnly) throws IOException;
}
