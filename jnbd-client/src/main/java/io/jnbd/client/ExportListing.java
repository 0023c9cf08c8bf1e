package io.jnbd.client;

/** One entry of a server's export list ({@code NBD_OPT_LIST}): a name and an optional human description. */
public record ExportListing(String name, String description) {}
