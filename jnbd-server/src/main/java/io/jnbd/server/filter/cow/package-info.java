/** The copy-on-write filter: per-export, per-connection or per-client overlays over a read-only base, kept on disk. */
package io.jnbd.server.filter.cow;
