package io.jnbd.client;

import io.jnbd.protocol.Nbd;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Completion callbacks run once the client has let go of every lock it holds, so that one may submit a request
 * on the same connection and wait for it; and they run on the threads docs/client.md names.
 */
class CallbackThreadsTest {

    private static final int SIZE = 8 << 20;
    /** The fake server's maximum payload. */
    private static final int PAYLOAD = 1 << 20;
    /** So long that a callback stuck waiting shows as the test's own failure, not as a timeout. */
    private static final ClientOptions OPTIONS = ClientOptions.defaults().withRequestTimeout(Duration.ofMinutes(10));

    /** Where a callback ran, what its request's outcome was, and how the request it then waited for ended. */
    record Seen(String thread, boolean virtual, boolean locked, String outcome, String waited) {
    }

    private static String ending(Throwable e) {
        return e == null ? "completed" : "failed with " + NbdClient.unwrap(e).getClass().getSimpleName();
    }

    /**
     * The callback under test: notes where it runs, then writes 1 MiB on the same client (one connection) and
     * waits for it. A payload that large is never sent by the submitting thread: it must go through the
     * connection's sender thread.
     */
    private static Seen submitAndWait(NbdClient client, Throwable outcome, long offset) {
        Thread t = Thread.currentThread();
        boolean locked = client.lockedByCurrentThread();
        CompletableFuture<Void> next = client.write(offset, ByteBuffer.allocateDirect(PAYLOAD), false);
        String waited;
        try {
            next.get(30, TimeUnit.SECONDS);
            waited = "completed";
        } catch (ExecutionException e) {
            waited = ending(e.getCause());
        } catch (TimeoutException e) {
            waited = "still waiting after 30 s";
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            waited = "interrupted";
        }
        return new Seen(t.getName(), t.isVirtual(), locked, ending(outcome), waited);
    }

    @Test
    void aCallbackOnAWriteAnsweredWhileItsPayloadWasStillBeingSentMaySubmitAndWait() throws Exception {
        answeredWhileSending(0, "completed");
    }

    @Test
    void aCallbackOnAWriteRefusedWhileItsPayloadWasStillBeingSentMaySubmitAndWait() throws Exception {
        answeredWhileSending(Nbd.EIO, "failed with NbdErrorException");
    }

    /**
     * The reply to a write arrives while the sender thread is still in the write's payload: the sender delivers
     * the outcome when it lets go of the payload. It used to do so still holding its lock, on its own thread,
     * so a callback's request queued behind it for ever.
     */
    private static void answeredWhileSending(int error, String expected) throws Exception {
        try (var server = new FakeNbdServer(new byte[SIZE], FakeNbdServer.Mode.EARLY_WRITE_REPLY);
             var client = NbdClient.connect(server.uri(), OPTIONS)) {
            server.writeError = error;
            HeldFile file = new HeldFile(FakeNbdServer.content(PAYLOAD), false);
            try {
                // The server holds this read back until the write's header is in, then answers the write, then it.
                CompletableFuture<Void> read = client.read(0, ByteBuffer.allocateDirect(4096));
                CompletableFuture<Seen> seen = client.write(PAYLOAD, file, 0, PAYLOAD, false)
                    .handle((v, e) -> submitAndWait(client, e, 2L * PAYLOAD));
                // One reader takes the replies in order: with the read done, the write's reply has been read while
                // the sender still held the payload.
                read.get(30, TimeUnit.SECONDS);
                assertThat(seen).isNotDone();
                file.letGo();
                Seen s = seen.get(60, TimeUnit.SECONDS);
                assertThat(s.outcome()).isEqualTo(expected);
                assertThat(s.waited()).as("the callback's own request, on %s", s.thread()).isEqualTo(expected);
                assertThat(s.locked()).as("a lock of the client held by %s", s.thread()).isFalse();
                assertThat(s.virtual()).as("%s is a virtual thread", s.thread()).isTrue();
            } finally {
                file.letGo();
            }
        }
    }

    /**
     * The sender's write fails, and with it the connection: the write and the read in flight beside it fail on
     * the sender thread, which used to complete them holding its lock.
     */
    @Test
    void callbacksOnRequestsFailedBySendingRunWithNoLockHeldAndMaySubmitAndWait() throws Exception {
        try (var server = new FakeNbdServer(new byte[SIZE], FakeNbdServer.Mode.SILENT);
             var client = NbdClient.connect(server.uri(), OPTIONS)) {
            HeldFile file = new HeldFile(new byte[PAYLOAD], true);
            try {
                CompletableFuture<Seen> read = client.read(0, ByteBuffer.allocateDirect(4096))
                    .handle((v, e) -> submitAndWait(client, e, 2L * PAYLOAD));
                CompletableFuture<Seen> write = client.write(PAYLOAD, file, 0, PAYLOAD, false)
                    .handle((v, e) -> submitAndWait(client, e, 3L * PAYLOAD));
                assertThat(file.sent.await(30, TimeUnit.SECONDS)).isTrue();
                file.letGo();
                for (CompletableFuture<Seen> f : List.of(read, write)) {
                    Seen s = f.get(60, TimeUnit.SECONDS);
                    assertThat(s.outcome()).isEqualTo("failed with NbdConnectionException");
                    // The connection is gone: the callback's request fails at once rather than waits.
                    assertThat(s.waited()).isEqualTo("failed with NbdConnectionException");
                    assertThat(s.locked()).as("a lock of the client held by %s", s.thread()).isFalse();
                    assertThat(s.virtual()).as("%s is a virtual thread", s.thread()).isTrue();
                }
            } finally {
                file.letGo();
            }
        }
    }

    @Test
    void repliesCompleteOnTheReaderThreadAndTimeoutsOnTheTimerThread() throws Exception {
        try (var server = new FakeNbdServer(FakeNbdServer.content(SIZE), FakeNbdServer.Mode.GATED);
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withRequestTimeout(Duration.ofSeconds(2)))) {
            try {
                CompletableFuture<String> replied = client.read(0, ByteBuffer.allocateDirect(4096))
                    .handle((v, e) -> ending(e) + " on " + Thread.currentThread().getName()
                        + (client.lockedByCurrentThread() ? " holding a lock" : ""));
                server.openGate();
                assertThat(replied.get(30, TimeUnit.SECONDS)).startsWith("completed on jnbd-reader-").doesNotContain("lock");
            } finally {
                server.openGate();
            }
            server.mode(FakeNbdServer.Mode.SILENT);
            CompletableFuture<String> timedOut = client.read(0, ByteBuffer.allocateDirect(4096))
                .handle((v, e) -> ending(e) + " on " + Thread.currentThread().getName()
                    + (client.lockedByCurrentThread() ? " holding a lock" : ""));
            assertThat(timedOut.get(30, TimeUnit.SECONDS)).isEqualTo("failed with NbdTimeoutException on jnbd-timer");
        }
    }
}
