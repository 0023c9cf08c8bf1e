/**
 * The filters a user stacks in front of a backend with {@code filter=NAME} (readonly, delay, error, rate, cache), each with
 * the {@link io.jnbd.server.backend.FilterFactory} that reads its keys. Names and keys are nbdkit's where nbdkit has
 * the filter.
 */
package io.jnbd.server.filter;
