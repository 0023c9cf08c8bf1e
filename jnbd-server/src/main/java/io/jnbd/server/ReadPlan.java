package io.jnbd.server;

/** How one read is cut into chunks for overlapped sending: {@code chunks} of {@code chunkSize}, {@code streams} at once. */
record ReadPlan(int chunks, int chunkSize, int streams) {
    static final ReadPlan WHOLE = new ReadPlan(1, 0, 1);
}
