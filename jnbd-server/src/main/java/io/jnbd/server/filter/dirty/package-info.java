/**
 * The {@code dirty} filter: named, persistent dirty bitmaps of an export (changed-block tracking), served as the
 * {@code qemu:dirty-bitmap:NAME} metadata context and managed through {@link io.jnbd.server.filter.dirty.DirtyBitmaps}.
 */
package io.jnbd.server.filter.dirty;
