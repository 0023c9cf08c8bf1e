package io.jnbd.server;

import io.jnbd.server.io.Releasable;
import io.jnbd.server.io.Channels;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.function.Consumer;

/**
 * The one thread that writes a connection's replies. Disk workers never touch the socket, so a client
 * that stops reading stalls only its own writer, never the shared I/O threads. Replies that are ready
 * together leave in one gathering write; a lone reply goes out at once.
 */
final class ReplyWriter implements Runnable {
    /** How many queued parts one gathering write may carry. */
    private static final int MAX_GATHER = 64;

    /**
     * One piece of output: header bytes, then either a buffer of data or a range of a file to sendfile.
     * {@code completes}: the request whose reply ends with this part, or null if more parts follow.
     * {@code lease}: released once the part is on the wire.
     */
    record Part(ByteBuffer header, ByteBuffer data, Releasable lease, FileChannel file, long filePosition,
                long fileLength, InFlight completes) {
        static Part of(ByteBuffer header, InFlight completes) {
            return new Part(header, null, null, null, 0, 0, completes);
        }

        static Part withData(ByteBuffer header, ByteBuffer data, Releasable lease, InFlight completes) {
            return new Part(header, data, lease, null, 0, 0, completes);
        }

        static Part withFile(ByteBuffer header, FileChannel file, long position, long length, InFlight completes) {
            return new Part(header, null, null, file, position, length, completes);
        }

        void release() {
            if (lease != null) lease.release();
        }
    }

    private static final Part END = Part.of(ByteBuffer.allocate(0), null);

    private final SocketChannel channel;
    private final LinkedBlockingQueue<Part> queue = new LinkedBlockingQueue<>();
    private final Consumer<InFlight> onRequestCompleted;
    private final Runnable onFailure;
    private volatile boolean failed;

    ReplyWriter(SocketChannel channel, Consumer<InFlight> onRequestCompleted, Runnable onFailure) {
        this.channel = channel;
        this.onRequestCompleted = onRequestCompleted;
        this.onFailure = onFailure;
    }

    void send(Part part) {
        if (failed) {
            part.release();
            if (part.completes != null) onRequestCompleted.accept(part.completes);
            return;
        }
        if (part.completes != null) part.completes.timing.queued = System.nanoTime();
        queue.add(part);
    }

    /** Asks the writer to stop once everything queued so far is written. */
    void finish() {
        queue.add(END);
    }

    @Override
    public void run() {
        List<Part> batch = new ArrayList<>(MAX_GATHER);
        try {
            while (true) {
                batch.clear();
                batch.add(queue.take());
                queue.drainTo(batch, MAX_GATHER - 1);
                boolean end = write(batch);
                if (end) return;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (IOException e) {
            failed = true;
            onFailure.run();
        } finally {
            release(batch);
            List<Part> rest = new ArrayList<>();
            queue.drainTo(rest);
            release(rest);
        }
    }

    private void release(List<Part> parts) {
        for (Part p : parts) {
            p.release();
            if (p.completes != null) onRequestCompleted.accept(p.completes);
        }
        parts.clear();
    }

    /**
     * Writes a batch; returns true if it reached the end marker. Parts that are on the wire are released and
     * removed from {@code batch}; whatever is left (behind an end marker, or after a failure) the caller releases.
     */
    private boolean write(List<Part> batch) throws IOException {
        List<ByteBuffer> gather = new ArrayList<>(batch.size() * 2);
        int sent = 0;
        try {
            for (int i = 0; i < batch.size(); i++) {
                Part p = batch.get(i);
                if (p == END) {
                    flush(gather);
                    complete(batch, sent, i);
                    sent = i;
                    return true;
                }
                gather.add(p.header);
                if (p.data != null) gather.add(p.data);
                if (p.file != null) {
                    flush(gather);
                    Channels.transferFully(p.file, p.filePosition, p.fileLength, channel);
                    complete(batch, sent, i + 1);
                    sent = i + 1;
                }
            }
            flush(gather);
            complete(batch, sent, batch.size());
            sent = batch.size();
            return false;
        } finally {
            batch.subList(0, sent).clear();
        }
    }

    private void complete(List<Part> batch, int from, int to) {
        for (int i = from; i < to; i++) {
            Part p = batch.get(i);
            p.release();
            if (p.completes != null) onRequestCompleted.accept(p.completes);
        }
    }

    private void flush(List<ByteBuffer> gather) throws IOException {
        if (gather.isEmpty()) return;
        Channels.writeFully(channel, gather.toArray(ByteBuffer[]::new));
        gather.clear();
    }
}
