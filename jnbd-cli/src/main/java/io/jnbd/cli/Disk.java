package io.jnbd.cli;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.Extent;
import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdUri;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/** What copy and cmp see of an operand: an NBD export or a local file, behind one small asynchronous face. */
sealed interface Disk extends AutoCloseable {

    String name();

    long size();

    /** Offsets and lengths of requests must be multiples of this. */
    int blockSize();

    /** Fills {@code dst} from position to limit; on success its position is advanced to the limit, as NIO does. */
    CompletableFuture<Void> read(long offset, ByteBuffer dst);

    /** Writes {@code src} from position to limit; on success its position is advanced to the limit. */
    CompletableFuture<Void> write(long offset, ByteBuffer src);

    /** Makes the range read as zeroes, as cheaply as the target allows. */
    CompletableFuture<Void> zero(long offset, long length);

    /** Allocation of the range; a disk that cannot tell reports one data extent. */
    List<Extent> extents(long offset, long length) throws IOException;

    void flush() throws IOException;

    @Override
    void close() throws IOException;

    /** Opens {@code spec}: a URI if it looks like one, else a local file. */
    static Disk open(String spec, ClientOptions options) throws IOException {
        if (NbdUri.looksLikeUri(spec)) return new Remote(NbdClient.connect(NbdUri.parse(spec), options));
        Path path = Path.of(spec);
        if (!Files.exists(path)) throw new NoSuchFileException(spec, null, "no such file (and not an nbd:// or nbds:// URI)");
        return new Local(path, FileChannel.open(path, StandardOpenOption.READ), false, null);
    }

    /**
     * Opens {@code spec} as a copy destination of {@code size} bytes. A local file is created or truncated and
     * then extended, so that it starts as one hole and zero ranges need no writing at all.
     */
    static Disk create(String spec, long size, ClientOptions options) throws IOException {
        if (NbdUri.looksLikeUri(spec)) {
            Remote r = new Remote(NbdClient.connect(NbdUri.parse(spec), options));
            if (r.client.info().readOnly()) {
                r.close();
                throw new IOException("destination " + spec + " is read-only");
            }
            if (r.size() < size) {
                r.close();
                throw new IOException("destination " + spec + " has " + r.size() + " bytes, the source " + size);
            }
            return r;
        }
        Path path = Path.of(spec);
        if (Files.exists(path) && !Files.isRegularFile(path)) {
            // A block or character device (/dev/sdX, /dev/null): written in place, its holes written as zeroes.
            return new Local(path, FileChannel.open(path, StandardOpenOption.WRITE), false, null);
        }
        var raf = new java.io.RandomAccessFile(path.toFile(), "rw");
        try {
            raf.setLength(0);
            raf.setLength(size);
        } catch (IOException e) {
            raf.close();
            throw e;
        }
        return new Local(path, raf.getChannel(), true, WriteBehind.open(path));
    }

    /**
     * Opens {@code spec}, which must exist and have exactly {@code size} bytes, as the destination of an
     * incremental copy: nothing is created, truncated or extended, since only the changed ranges will be written
     * and the rest must already be the source's. {@code writeBehind}: a regular file's writes go through a
     * {@link WriteBehind}.
     */
    static Disk openExisting(String spec, long size, ClientOptions options, boolean writeBehind) throws IOException {
        String again = ": an incremental copy (--bitmap) goes onto the destination of an earlier full copy";
        if (NbdUri.looksLikeUri(spec)) {
            Remote r = new Remote(NbdClient.connect(NbdUri.parse(spec), options));
            if (r.client.info().readOnly() || r.size() != size) {
                r.close();
                throw new IOException("destination " + spec + (r.client.info().readOnly() ? " is read-only"
                    : " has " + r.size() + " bytes, the source " + size + again));
            }
            return r;
        }
        Path path = Path.of(spec);
        if (!Files.exists(path)) {
            throw new NoSuchFileException(spec, null, "no such file" + again + "; it creates none");
        }
        FileChannel channel = FileChannel.open(path, StandardOpenOption.WRITE, StandardOpenOption.READ);
        try {
            long has = channel.size();
            if (has != size) throw new IOException("destination " + spec + " has " + has + " bytes, the source " + size + again);
        } catch (IOException e) {
            channel.close();
            throw e;
        }
        return new Local(path, channel, false, writeBehind && Files.isRegularFile(path) ? WriteBehind.open(path) : null);
    }

    record Remote(NbdClient client) implements Disk {
        public String name() { return client.uri().toString(); }
        public long size() { return client.size(); }
        public int blockSize() { return client.info().minimumBlockSize(); }
        public CompletableFuture<Void> read(long offset, ByteBuffer dst) { return client.read(offset, dst); }
        public CompletableFuture<Void> write(long offset, ByteBuffer src) { return client.write(offset, src, false); }
        public CompletableFuture<Void> zero(long offset, long length) {
            return client.writeZeroes(offset, length, false, false, false);
        }
        public List<Extent> extents(long offset, long length) throws IOException {
            // One request at a time: the caller walks the disk and asks again where the answer stopped.
            return client.blocking().blockStatus(offset, length);
        }
        public void flush() throws IOException { client.blocking().flush(); }
        public void close() { client.close(); }
    }

    /**
     * A local file. Its I/O is synchronous positional reads and writes, the futures complete on return; but a
     * fresh destination's writes run on a thread of their own and go to the disk as the copy runs
     * ({@link WriteBehind}; null where unavailable).
     */
    record Local(Path path, FileChannel channel, boolean fresh, WriteBehind behind) implements Disk {
        public String name() { return path.toString(); }

        public long size() {
            try {
                return channel.size();
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }

        public int blockSize() { return 1; }

        public CompletableFuture<Void> read(long offset, ByteBuffer dst) {
            try {
                ByteBuffer b = dst.duplicate();
                while (b.hasRemaining()) {
                    if (channel.read(b, offset + b.position() - dst.position()) < 0) {
                        throw new IOException(path + " ended at " + (offset + b.position() - dst.position()));
                    }
                }
                dst.position(dst.limit());
                return CompletableFuture.completedFuture(null);
            } catch (IOException e) {
                return CompletableFuture.failedFuture(e);
            }
        }

        public CompletableFuture<Void> write(long offset, ByteBuffer src) {
            if (behind != null) return behind.write(channel, offset, src);
            try {
                writeFully(channel, offset, src);
                return CompletableFuture.completedFuture(null);
            } catch (IOException e) {
                return CompletableFuture.failedFuture(e);
            }
        }

        /** Writes {@code src} (position to limit) at {@code offset}, then moves its position to the limit. */
        static void writeFully(FileChannel channel, long offset, ByteBuffer src) throws IOException {
            ByteBuffer b = src.duplicate();
            while (b.hasRemaining()) channel.write(b, offset + b.position() - src.position());
            src.position(src.limit());
        }

        public CompletableFuture<Void> zero(long offset, long length) {
            // A fresh file is all hole: leaving the range alone keeps it sparse.
            if (fresh) return CompletableFuture.completedFuture(null);
            ByteBuffer z = ByteBuffer.allocate((int) Math.min(length, 1 << 20));
            List<CompletableFuture<Void>> writes = new java.util.ArrayList<>();
            for (long done = 0; done < length; ) {
                int n = (int) Math.min(z.capacity(), length - done);
                var f = write(offset + done, z.slice(0, n));
                if (f.isCompletedExceptionally()) return f;
                writes.add(f); // with a WriteBehind, still running on its thread
                done += n;
            }
            return CompletableFuture.allOf(writes.toArray(CompletableFuture[]::new));
        }

        public List<Extent> extents(long offset, long length) {
            return List.of(new Extent(offset, length, 0));
        }

        public void flush() throws IOException {
            try {
                channel.force(false);
            } catch (IOException e) {
                // Character devices such as /dev/null cannot be synced (EINVAL); there is nothing to make durable.
                if (Files.isRegularFile(path)) throw e;
            }
        }

        public void close() throws IOException {
            if (behind != null) behind.close();
            channel.close();
        }
    }
}
