package io.jnbd.server;

/**
 * How one read is cut into pieces that are read from the backend and sent as they are read (see {@link SplitRead}).
 *
 * <p>Pieces lie on boundaries of {@code pieceSize} counted from offset 0 of the export, so that on a direct export
 * each is whole disk blocks; the first and last may be shorter. {@code streams} pieces are read at once, and at most
 * {@code held} pieces hold a buffer at once (read, or waiting for the wire): what bounds the memory of a read far
 * larger than any buffer.
 *
 * @param ordered one reply header for the whole read and the pieces behind it in offset order: a simple reply, or
 *                a structured read the client asked not to fragment (DF). Otherwise each piece is an OFFSET_DATA
 *                chunk of its own, sent in whatever order the backend finishes them.
 */
record ReadPlan(long offset, long length, int pieceSize, int streams, int held, boolean ordered) {
    ReadPlan {
        if (pieceSize <= 0 || streams < 1 || held < 1 || length <= 0) throw new IllegalArgumentException("read plan " + pieceSize);
    }

    private long base() {
        return offset - offset % pieceSize;
    }

    int pieces() {
        return (int) ((offset + length - base() + pieceSize - 1) / pieceSize);
    }

    long start(int piece) {
        return Math.max(offset, base() + (long) piece * pieceSize);
    }

    int length(int piece) {
        long end = Math.min(offset + length, base() + (long) (piece + 1) * pieceSize);
        return (int) (end - start(piece));
    }
}
