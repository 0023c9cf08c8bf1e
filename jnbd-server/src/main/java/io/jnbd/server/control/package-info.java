/**
 * The control endpoint: a Unix-domain socket through which the server's own user (or root) changes a running
 * server's dirty bitmaps, one JSON request per line; and the client that {@code jnbd bitmap} speaks it with.
 * Kept off the NBD data path: its own threads, its own socket, found only through the export registry.
 */
package io.jnbd.server.control;
