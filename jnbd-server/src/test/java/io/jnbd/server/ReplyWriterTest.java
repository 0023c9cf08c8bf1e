package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.io.PageCacheSource;
import io.jnbd.server.net.Transport;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The reader sends its own replies, taking along whatever an I/O thread queued ahead of them, so that no reply it
 * made waits for the writer thread to be scheduled; the order on the wire stays the order of queueing.
 */
@Timeout(30)
class ReplyWriterTest {

    /** Records what is sent, one entry per send call; fails every send once {@code broken}. */
    private static final class Wire implements Transport {
        final List<String> sends = new ArrayList<>();
        volatile boolean broken;

        @Override
        public synchronized void send(ByteBuffer... srcs) throws IOException {
            if (broken) throw new IOException("connection reset");
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            for (ByteBuffer b : srcs) {
                byte[] bytes = new byte[b.remaining()];
                b.get(bytes);
                out.writeBytes(bytes);
            }
            sends.add(out.toString(StandardCharsets.US_ASCII));
        }

        synchronized List<String> sends() {
            return List.copyOf(sends);
        }

        @Override public int receive(ByteBuffer dst) { return -1; }
        @Override public int receiveNow(ByteBuffer dst) { return -1; }
        @Override public boolean awaitReadable(long timeoutMillis) { return true; }
        @Override public int pending() { return 0; }
        @Override public void lowWater(int bytes) {}
        @Override public boolean canWaitForArrival() { return false; }
        @Override public long sendNow(ByteBuffer... srcs) { return 0; } // the socket takes nothing without waiting
        @Override public void sendFile(ByteBuffer header, PageCacheSource file, long position, long length) {
            throw new UnsupportedOperationException();
        }
        @Override public boolean zeroCopyFiles() { return false; }
        @Override public long lastSentNanos() { return 0; }
        @Override public boolean canSendNow() { return true; }
        @Override public void shutdownInput() {}
        @Override public void shutdown() {}
        @Override public void close() {}
    }

    private static ReplyWriter.Part part(String text, AtomicInteger released) {
        ByteBuffer header = ByteBuffer.wrap(text.getBytes(StandardCharsets.US_ASCII));
        return ReplyWriter.Part.withData(header, ByteBuffer.allocate(0), released::incrementAndGet, null);
    }

    @Test
    void theReaderSendsWhatWasQueuedAheadThenItsOwnInOneWrite() {
        Wire wire = new Wire();
        AtomicInteger failures = new AtomicInteger();
        ReplyWriter writer = new ReplyWriter(wire, f -> { }, failures::incrementAndGet);
        AtomicInteger released = new AtomicInteger();
        // The socket takes nothing without waiting, so an I/O thread's reply is queued for the writer thread,
        // which is never started here: only the reader can get it out.
        writer.sendFromWorker(part("worker;", released));
        assertThat(wire.sends()).isEmpty();

        writer.sendInline(List.of(part("a;", released), part("b;", released)));

        assertThat(wire.sends()).containsExactly("worker;a;b;");
        assertThat(released).hasValue(3);
        assertThat(failures).hasValue(0);
    }

    @Test
    void theEndMarkerIsLeftForTheWriterThread() throws InterruptedException {
        Wire wire = new Wire();
        ReplyWriter writer = new ReplyWriter(wire, f -> { }, () -> { });
        AtomicInteger released = new AtomicInteger();
        writer.sendFromWorker(part("last;", released));
        writer.finish();
        writer.sendInline(List.of(part("late;", released)));

        Thread thread = Thread.ofVirtual().start(writer);
        thread.join(java.time.Duration.ofSeconds(10));
        assertThat(thread.isAlive()).as("the writer thread found its end marker").isFalse();
        assertThat(String.join("", wire.sends())).isEqualTo("last;late;");
        assertThat(released).hasValue(2);
    }

    @Test
    void afterTheSocketFailedTheReadersRepliesAreReleasedNotSent() {
        Wire wire = new Wire();
        AtomicInteger failures = new AtomicInteger();
        ReplyWriter writer = new ReplyWriter(wire, f -> { }, failures::incrementAndGet);
        AtomicInteger released = new AtomicInteger();
        wire.broken = true;
        writer.sendInline(List.of(part("a;", released)));
        assertThat(writer.failed()).isTrue();
        assertThat(failures).hasValue(1);

        wire.broken = false;
        writer.sendInline(List.of(part("b;", released), part("c;", released)));
        assertThat(wire.sends()).isEmpty();
        assertThat(released).hasValue(3);
        assertThat(failures).as("one failure, reported once").hasValue(1);
    }
}
