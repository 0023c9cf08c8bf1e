/**
 * The memory pool (NMS): memory servers that keep pages of many clients in RAM with a disk tier behind,
 * and a pool client that spreads a virtual disk over them in replicated extents, served as an NBD export.
 */
package io.jnbd.pool;
