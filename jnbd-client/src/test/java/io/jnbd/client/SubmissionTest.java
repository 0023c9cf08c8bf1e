package io.jnbd.client;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Submitting never waits for the server: not for a request slot, not for another thread's write. */
class SubmissionTest {

    private static final int SIZE = 40 << 20;

    /** Runs {@code calls} on a thread of its own and fails if they have not returned within 10 s. */
    private static <T> T returnsAtOnce(java.util.concurrent.Callable<T> calls) throws Exception {
        CompletableFuture<T> result = new CompletableFuture<>();
        Thread t = Thread.ofPlatform().daemon().name("submitter").start(() -> {
            try {
                result.complete(calls.call());
            } catch (Throwable e) {
                result.completeExceptionally(e);
            }
        });
        try {
            return result.get(10, TimeUnit.SECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            AssertionError error = new AssertionError("the submitting thread was still blocked after 10 s");
            error.setStackTrace(t.getStackTrace());
            throw error;
        }
    }

    private static List<Long> offsetsReceived(FakeNbdServer server, int type) {
        synchronized (server.received) {
            return server.received.stream().filter(r -> r.type() == type).map(Request::offset).toList();
        }
    }

    @Test
    void submissionsBeyondTheWindowAreQueuedAndSentInOrder() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.GATED);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestsInFlight(1)
                 .withRequestTimeout(Duration.ZERO))) {
            try {
                List<ByteBuffer> bufs = new ArrayList<>();
                for (int i = 0; i < 6; i++) bufs.add(ByteBuffer.allocateDirect(4096));
                // The first takes the only slot and is not answered until the gate opens; the others must queue.
                List<CompletableFuture<Void>> reads = returnsAtOnce(() -> {
                    List<CompletableFuture<Void>> list = new ArrayList<>();
                    for (int i = 0; i < bufs.size(); i++) list.add(client.read((5L - i) * 8192, bufs.get(i)));
                    return list;
                });
                assertThat(reads).noneMatch(CompletableFuture::isDone);
                server.openGate();
                CompletableFuture.allOf(reads.toArray(CompletableFuture[]::new)).get(10, TimeUnit.SECONDS);
                for (int i = 0; i < bufs.size(); i++) {
                    int from = (5 - i) * 8192;
                    assertThat(bufs.get(i).flip()).isEqualTo(ByteBuffer.wrap(Arrays.copyOfRange(disk, from, from + 4096)));
                }
                assertThat(offsetsReceived(server, Nbd.CMD_READ)).containsExactly(40960L, 32768L, 24576L, 16384L, 8192L, 0L);
            } finally {
                server.openGate(); // lets a client stuck in a write get out, so that a failure ends
            }
        }
    }

    /**
     * Requests submitted by completion callbacks on the reader thread are held until the reader is about to
     * wait, then sent together: here each reply's callback submits the next read and a small write, 200 deep,
     * and every one must go out, in submission order, with the right data.
     */
    @Test
    void requestsSubmittedOnTheReaderThreadAreAllSentInOrder() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.REVERSE);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestsInFlight(8))) {
            int chains = 8, steps = 25;
            List<CompletableFuture<Void>> ends = new ArrayList<>();
            List<ByteBuffer> lastReads = new ArrayList<>();
            for (int c = 0; c < chains; c++) {
                CompletableFuture<Void> end = new CompletableFuture<>();
                ends.add(end);
                ByteBuffer buf = ByteBuffer.allocateDirect(4096);
                lastReads.add(buf);
                chain(client, c, 0, steps, buf, end);
            }
            CompletableFuture.allOf(ends.toArray(CompletableFuture[]::new)).get(30, TimeUnit.SECONDS);
            // Each chain's writes went out in its order: the last one written is what a read now sees.
            for (int c = 0; c < chains; c++) {
                ByteBuffer back = ByteBuffer.allocateDirect(512);
                client.blocking().read((1L << 20) + c * 512L, back);
                assertThat(back.get(0)).as("chain %d", c).isEqualTo((byte) (steps - 1));
            }
            assertThat(offsetsReceived(server, Nbd.CMD_READ)).hasSizeGreaterThanOrEqualTo(chains * steps);
        }
    }

    /** One step of a chain: a read, and from its callback (on the reader thread) a write and the next step. */
    private static void chain(NbdClient client, int c, int step, int steps, ByteBuffer buf,
                              CompletableFuture<Void> end) {
        long offset = ((long) (c * steps + step) * 4096) % (SIZE / 2);
        client.read(offset, buf.clear()).whenComplete((v, e) -> {
            if (e != null) {
                end.completeExceptionally(e);
                return;
            }
            ByteBuffer w = ByteBuffer.allocateDirect(512);
            for (int i = 0; i < 512; i++) w.put(i, (byte) step);
            client.write((1L << 20) + c * 512L, w, false);
            if (step + 1 == steps) end.complete(null);
            else chain(client, c, step + 1, steps, buf, end);
        });
    }

    @Test
    void aReaderThreadCallbackSubmittingOnADeadConnectionFailsRatherThanWaits() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.DROP);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestTimeout(Duration.ZERO))) {
            CompletableFuture<CompletableFuture<Void>> next = new CompletableFuture<>();
            client.read(0, ByteBuffer.allocateDirect(4096)).whenComplete((v, e) ->
                next.complete(client.read(4096, ByteBuffer.allocateDirect(4096))));
            // The first read's failure runs the callback, whose read must fail too rather than wait forever.
            assertThatThrownBy(() -> next.get(10, TimeUnit.SECONDS).get(10, TimeUnit.SECONDS))
                .hasCauseInstanceOf(NbdConnectionException.class);
        }
    }

    /**
     * A timeout is delivered on the client's timer thread, and a caller may close that client from the callback
     * (the pool does, for a server it gave up on) and go on with another client there. Closing must not
     * interrupt the timer thread: the other client's inline send would then close its own socket (an
     * interrupted thread's channel I/O does), and a healthy server would be lost with it.
     */
    @Test
    void closingAClientInItsTimeoutCallbackLeavesAnotherClientsSendsAlone() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var hung = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.SILENT);
             var healthy = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.REVERSE);
             var a = NbdClient.connect(hung.uri(), ClientOptions.defaults().withRequestTimeout(Duration.ofMillis(200)));
             var b = NbdClient.connect(healthy.uri(), ClientOptions.defaults().withRequestTimeout(Duration.ZERO))) {
            CompletableFuture<CompletableFuture<Void>> next = new CompletableFuture<>();
            ByteBuffer buf = ByteBuffer.allocateDirect(4096);
            a.read(0, ByteBuffer.allocateDirect(4096)).whenComplete((v, e) -> {
                a.close();
                next.complete(b.read(8192, buf));
            });
            next.get(10, TimeUnit.SECONDS).get(10, TimeUnit.SECONDS);
            assertThat(buf.flip()).isEqualTo(ByteBuffer.wrap(Arrays.copyOfRange(disk, 8192, 8192 + 4096)));
            ByteBuffer again = ByteBuffer.allocateDirect(4096);
            b.read(0, again).get(10, TimeUnit.SECONDS);
            assertThat(again.flip()).isEqualTo(ByteBuffer.wrap(Arrays.copyOfRange(disk, 0, 4096)));
        }
    }

    @Test
    void submittingWhileAnotherThreadsLargeWriteIsStuckReturnsAtOnce() throws Exception {
        try (var server = new FakeNbdServer(new byte[SIZE], FakeNbdServer.Mode.GATED);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestTimeout(Duration.ZERO))) {
            try {
                // Far more than the socket buffers hold while the server reads nothing.
                ByteBuffer data = ByteBuffer.allocateDirect(32 << 20);
                for (int i = 0; i < data.capacity(); i += 4096) data.putInt(i, i);
                ByteBuffer small = ByteBuffer.allocateDirect(4096);
                for (int i = 0; i < 4096; i++) small.put(i, (byte) (i + 1));
                CompletableFuture<Void> write = returnsAtOnce(() -> client.write(0, data, false));
                CompletableFuture<Void> smallWrite = returnsAtOnce(() -> client.write(36 << 20, small, false));
                ByteBuffer back = ByteBuffer.allocateDirect(4096);
                CompletableFuture<Void> read = returnsAtOnce(() -> client.read(36 << 20, back));
                server.openGate();
                CompletableFuture.allOf(write, smallWrite, read).get(30, TimeUnit.SECONDS);
                // Submission order holds on the wire: the read, submitted after the small write, sees its data.
                assertThat(back.flip()).isEqualTo(small.flip());
                ByteBuffer whole = ByteBuffer.allocateDirect(32 << 20);
                client.read(0, whole).get(30, TimeUnit.SECONDS);
                assertThat(whole.flip().mismatch(data.flip())).isEqualTo(-1);
            } finally {
                server.openGate(); // lets a client stuck in a write get out, so that a failure ends
            }
        }
    }

    @Test
    void aRequestThatTimesOutWhileQueuedFailsAndIsNeverSent() throws Exception {
        byte[] disk = FakeNbdServer.content(SIZE);
        try (var server = new FakeNbdServer(disk.clone(), FakeNbdServer.Mode.GATED);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestsInFlight(1)
                 .withRequestTimeout(Duration.ofMillis(300)))) {
            try {
                CompletableFuture<Void> first = returnsAtOnce(() -> client.read(0, ByteBuffer.allocate(4096)));
                CompletableFuture<Void> queued = returnsAtOnce(() -> client.read(8192, ByteBuffer.allocate(4096)));
                assertThatThrownBy(() -> first.get(10, TimeUnit.SECONDS)).cause().isInstanceOf(NbdTimeoutException.class)
                    .hasMessageContaining("got no reply");
                assertThatThrownBy(() -> queued.get(10, TimeUnit.SECONDS)).cause().isInstanceOf(NbdTimeoutException.class)
                    .hasMessageContaining("was not sent");
                server.openGate();
                // The late reply to the first frees the slot; the next request goes out, the timed-out one never did.
                ByteBuffer next = ByteBuffer.allocate(4096);
                client.read(16384, next).get(10, TimeUnit.SECONDS);
                assertThat(next.array()).isEqualTo(Arrays.copyOfRange(disk, 16384, 16384 + 4096));
                assertThat(offsetsReceived(server, Nbd.CMD_READ)).containsExactly(0L, 16384L);
            } finally {
                server.openGate(); // lets a client stuck in a write get out, so that a failure ends
            }
        }
    }

    @Test
    void futuresCompleteOnTheCompletionExecutor() throws Exception {
        java.util.concurrent.atomic.AtomicInteger n = new java.util.concurrent.atomic.AtomicInteger();
        ExecutorService completions = Executors.newFixedThreadPool(2, r -> new Thread(r, "completions-" + n.incrementAndGet()));
        try (var server = new FakeNbdServer(FakeNbdServer.content(1 << 20), FakeNbdServer.Mode.GATED);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withCompletionExecutor(completions))) {
            // Callbacks attached before the replies can arrive run where the futures are completed.
            CompletableFuture<String> failed = client.read(0, ByteBuffer.allocate(4096))
                .handle((v, e) -> (e != null ? "failed on " : "read on ") + Thread.currentThread().getName());
            CompletableFuture<String> status = client.blockStatus(0, 4096)
                .handle((v, e) -> (e != null ? "failed on " : "status on ") + Thread.currentThread().getName());
            server.mode(FakeNbdServer.Mode.ERROR); // reads fail, block status still answers
            server.openGate();
            assertThat(failed.get(10, TimeUnit.SECONDS)).startsWith("failed on completions-");
            assertThat(status.get(10, TimeUnit.SECONDS)).startsWith("status on completions-");
        } finally {
            completions.shutdownNow();
        }
    }

    @Test
    void answeredRequestsLeaveNoTimerTasksBehind() throws Exception {
        try (var server = new FakeNbdServer(FakeNbdServer.content(1 << 20), FakeNbdServer.Mode.REVERSE);
             var client = NbdClient.connect(server.uri())) {
            ByteBuffer buf = ByteBuffer.allocateDirect(4096);
            for (int i = 0; i < 1000; i++) client.read(i % 256 * 4096L, buf.clear()).get(10, TimeUnit.SECONDS);
            // With a task per request, each answered request's cancelled task would stay queued (for the
            // default two minutes) until it would have fired: heap a busy client cannot afford.
            assertThat(client.timerTasks()).isLessThan(10);
        }
    }
}
