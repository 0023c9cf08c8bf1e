package io.jnbd.server.backend;

/**
 * A backend with a state worth reporting beyond size and flags (a pool: its servers, copies and recovery). The
 * server serves it as JSON in a read-only export named after the backend's with {@code /status} added.
 */
public interface StatusReporting {
    byte[] statusJson();
}
