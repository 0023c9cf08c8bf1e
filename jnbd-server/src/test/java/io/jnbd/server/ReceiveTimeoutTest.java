package io.jnbd.server;

import static io.jnbd.server.ServerFixture.pattern;
import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The receive timeout: a client that sends part of a request and then nothing is dropped once the timeout
 * passes, and gives back what it held; a client idle between requests is not, however long it idles; a
 * client that keeps sending, however slowly, is not either.
 */
@Timeout(120)
class ReceiveTimeoutTest {
    static final Duration TIMEOUT = Duration.ofSeconds(1);
    ServerFixture fx;

    @TempDir
    Path dir;

    @BeforeEach
    void start() throws IOException {
        fx = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(1L << 30)),
                ExportSpec.parse("direct", "file:" + dir.resolve("d.img") + ",size=64M,mode=direct").openExport()),
            ServerConfig.defaults().withReceiveTimeout(TIMEOUT));
    }

    @AfterEach
    void stop() {
        fx.close();
    }

    @Test
    void halfAHeaderThenSilenceIsDroppedAfterTheTimeoutWhileAnIdleClientStays() throws Exception {
        try (RawClient idle = fx.open("mem"); RawClient half = fx.open("mem")) {
            ByteBuffer header = encoded(new Request(0, Nbd.CMD_READ, 1, 0, 4096));
            half.write(header.limit(14));
            long sent = System.nanoTime();
            assertThat(half.closedByPeer()).as("a client stopped in the middle of a header is closed").isTrue();
            assertThat(Duration.ofNanos(System.nanoTime() - sent)).as("not before the receive timeout").isGreaterThanOrEqualTo(TIMEOUT);
            // Twice the timeout without a byte, between requests: still served.
            Thread.sleep(2 * TIMEOUT.toMillis());
            byte[] d = pattern(1, 8192);
            assertThat(idle.write(4096, d, 0)).isZero();
            assertThat(idle.read(4096, d.length)).isEqualTo(d);
        }
        awaitDrained(0);
    }

    @Test
    void aWriteHeaderWithoutPayloadHoldsNothingAndIsDropped() throws Exception {
        stallInPayload("mem", 32 << 20, 0, 0);
    }

    @Test
    void aSmallPayloadThatStopsHoldsNothingAndIsDropped() throws Exception {
        stallInPayload("mem", 64 << 10, 1000, 0);
    }

    @Test
    void aLargePayloadThatStopsHoldsOnlyItsWholePiecesAndIsDropped() throws Exception {
        // 2.5 MiB of 8 MiB: two whole pieces are leased; the third waits in the kernel for the rest of its bytes.
        stallInPayload("mem", 8 << 20, (5 << 20) / 2, 2 * Intake.PIECE);
    }

    @Test
    void aDirectWriteSplitAsItArrivesThatStopsHoldsNothingAndIsDropped() throws Exception {
        // A QD1 direct write above the split threshold: each piece goes to the disk and back to the pool as it arrives.
        stallInPayload("direct", 16 << 20, (5 << 20) / 2, 0);
    }

    /**
     * A client announces a write of {@code claimed} bytes and sends {@code sent} of them; while it is stalled
     * another client is served and the server holds {@code held} bytes for it; after the receive timeout it is
     * dropped and everything comes back.
     */
    private void stallInPayload(String export, int claimed, int sent, long held) throws Exception {
        fx.close();
        Duration timeout = Duration.ofSeconds(4); // long enough to look at what the stalled client holds
        fx = new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(1L << 30)),
                ExportSpec.parse("direct", "file:" + dir.resolve("d.img") + ",mode=direct").openExport()),
            ServerConfig.defaults().withReceiveTimeout(timeout));
        try (RawClient good = fx.open(export); RawClient stalled = fx.open(export)) {
            long start = System.nanoTime();
            stalled.write(encoded(new Request(0, Nbd.CMD_WRITE, 1, 0, claimed)));
            stalled.write(pattern(2, sent));
            byte[] d = pattern(3, 4096);
            assertThat(good.write(32L << 20, d, 0)).isZero();
            assertThat(good.read(32L << 20, d.length)).isEqualTo(d);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
            while (fx.server.bufferBytesInUse() != held && System.nanoTime() < deadline) Thread.sleep(5);
            assertThat(fx.server.bufferBytesInUse()).as("bytes held for the stalled write").isEqualTo(held);
            assertThat(fx.server.connectionCount()).as("not dropped yet").isEqualTo(2);
            assertThat(stalled.closedByPeer()).isTrue();
            assertThat(Duration.ofNanos(System.nanoTime() - start)).as("not before the receive timeout").isGreaterThanOrEqualTo(timeout);
        }
        awaitDrained(0);
    }

    @Test
    void aPayloadThatKeepsComingSlowerThanTheTimeoutInTotalIsServed() throws Exception {
        // One 1 MiB piece in 16 parts, 200 ms apart: three times the timeout in all, never a quarter of it
        // without a byte. The piece is complete only at the end, so progress must be seen under the raised
        // low-water mark.
        int length = Intake.PIECE, parts = 16;
        byte[] data = pattern(4, length);
        try (RawClient c = fx.open("mem")) {
            c.write(encoded(new Request(0, Nbd.CMD_WRITE, 7, 0, length)));
            for (int i = 0; i < parts; i++) {
                c.write(Arrays.copyOfRange(data, i * (length / parts), (i + 1) * (length / parts)));
                Thread.sleep(200);
            }
            RawClient.Reply reply = c.readReply();
            assertThat(reply.cookie()).isEqualTo(7);
            assertThat(reply.error()).isZero();
            assertThat(c.read(0, length)).isEqualTo(data);
        }
    }

    @Test
    void aClientIdleBetweenRequestsWhileAnotherIsDroppedKeepsItsSession() throws Exception {
        try (RawClient idle = fx.open("direct")) {
            byte[] d = pattern(5, 1 << 20);
            assertThat(idle.write(0, d, 0)).isZero();
            try (RawClient half = fx.open("direct")) {
                half.write(encoded(new Request(0, Nbd.CMD_WRITE, 1, 0, 1 << 20)).limit(20));
                assertThat(half.closedByPeer()).isTrue();
            }
            Thread.sleep(TIMEOUT.toMillis());
            assertThat(idle.read(0, d.length)).isEqualTo(d);
        }
    }

    /** Waits until only {@code connections} remain and no buffer is on loan, then asserts it. */
    private void awaitDrained(int connections) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while ((fx.server.bufferBytesInUse() != 0 || fx.server.connectionCount() != connections)
                && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertThat(fx.server.bufferBytesInUse()).as("buffer bytes on loan").isZero();
        assertThat(fx.server.connectionCount()).isEqualTo(connections);
    }

    private static ByteBuffer encoded(Request r) {
        ByteBuffer b = ByteBuffer.allocate(Nbd.REQUEST_SIZE);
        r.encode(b);
        return b.flip();
    }
}
