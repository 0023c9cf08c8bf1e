package io.jnbd.server.filter.cow;

import io.jnbd.server.backend.Backend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * What an overlay records of the base it was made over, so that a changed base refuses the overlay rather than mixing
 * old changes with new data: a SHA-256 of the base's size, its first and last MiB, and 62 samples of 4 KiB spread evenly
 * between them.
 *
 * <p>Why the content and not the file's identity (device, inode, mtime): the base may be any backend (a file, memory,
 * another server's export through {@code nbd:}), and a golden image copied or moved to a new disk (cp, rsync) is still
 * the same image; reimaging rewrites the partition table and file system headers at the start, which the first MiB
 * holds. What it misses: a change confined to the unsampled middle of the image. It costs 2.25 MiB of reads at open.
 */
final class BaseFingerprint {
    static final int LENGTH = 32;
    private static final int EDGE = 1 << 20, SAMPLE = 4096, SAMPLES = 62;

    private BaseFingerprint() {}

    static byte[] of(Backend base) throws IOException {
        MessageDigest sha;
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new AssertionError("every JDK has SHA-256", e);
        }
        long size = base.size();
        sha.update(ByteBuffer.allocate(8).putLong(size).flip());
        ByteBuffer buf = ByteBuffer.allocateDirect(EDGE);
        hash(base, sha, buf, 0, Math.min(EDGE, size));
        long middle = size - 2L * EDGE;
        for (int i = 1; middle > 0 && i <= SAMPLES; i++) {
            long at = (EDGE + middle / (SAMPLES + 1) * i) & -SAMPLE;
            hash(base, sha, buf, at, Math.min(SAMPLE, size - at));
        }
        if (size > EDGE) hash(base, sha, buf, Math.max(EDGE, size - EDGE), Math.min(EDGE, size - EDGE));
        return sha.digest();
    }

    private static void hash(Backend base, MessageDigest sha, ByteBuffer buf, long offset, long length) throws IOException {
        buf.clear().limit((int) length);
        base.read(offset, buf);
        sha.update(buf.flip());
    }
}
