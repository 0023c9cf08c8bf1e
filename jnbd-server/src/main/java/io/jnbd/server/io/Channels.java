package io.jnbd.server.io;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.ReadableByteChannel;
import java.nio.channels.WritableByteChannel;
import java.nio.channels.GatheringByteChannel;

/** Whole-buffer reads and writes over blocking channels. */
public final class Channels {
    private Channels() {}

    /** Fills {@code dst}; false on a clean EOF before the first byte, EOFException on EOF after it. */
    public static boolean readFully(ReadableByteChannel ch, ByteBuffer dst) throws IOException {
        boolean any = false;
        while (dst.hasRemaining()) {
            int n = ch.read(dst);
            if (n < 0) {
                if (!any) return false;
                throw new EOFException("peer closed the connection in the middle of a message");
            }
            if (n > 0) any = true;
        }
        return true;
    }

    public static void readExactly(ReadableByteChannel ch, ByteBuffer dst) throws IOException {
        if (!readFully(ch, dst)) throw new EOFException("peer closed the connection");
    }

    public static void writeFully(WritableByteChannel ch, ByteBuffer src) throws IOException {
        while (src.hasRemaining()) ch.write(src);
    }

    public static void writeFully(GatheringByteChannel ch, ByteBuffer[] srcs) throws IOException {
        long left = 0;
        for (ByteBuffer b : srcs) left += b.remaining();
        while (left > 0) left -= ch.write(srcs);
    }

    /** Reads and throws away {@code length} bytes through a small scratch buffer. */
    public static void discard(ReadableByteChannel ch, long length, ByteBuffer scratch) throws IOException {
        long left = length;
        while (left > 0) {
            scratch.clear().limit((int) Math.min(scratch.capacity(), left));
            readExactly(ch, scratch);
            left -= scratch.position();
        }
    }

    /**
     * Sends {@code length} bytes of {@code file} from {@code position} by sendfile. A file that shrank under
     * us cannot supply the bytes promised in the header; the caller must then drop the connection.
     */
    public static void transferFully(FileChannel file, long position, long length, WritableByteChannel out) throws IOException {
        long pos = position, end = position + length;
        while (pos < end) {
            long n = file.transferTo(pos, end - pos, out);
            if (n <= 0 && pos >= file.size()) throw new EOFException("file ended at " + pos + " while sending a read");
            pos += n;
        }
    }
}
