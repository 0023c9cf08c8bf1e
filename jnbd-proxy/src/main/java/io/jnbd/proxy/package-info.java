/** The {@code nbd:} backend: an export of another NBD server, served again through jnbd's own client. */
package io.jnbd.proxy;
