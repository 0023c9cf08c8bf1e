package io.jnbd.cli;

import picocli.CommandLine.Command;

/** Placeholder so the client branch compiles until main's ServeCommand is merged; replaced on merge. */
@Command(name = "serve", description = "Serve exports over NBD (not in this branch yet).")
public final class ServeCommand implements Runnable {
    @Override
    public void run() {
        throw new UnsupportedOperationException("serve is not available in this build");
    }
}
