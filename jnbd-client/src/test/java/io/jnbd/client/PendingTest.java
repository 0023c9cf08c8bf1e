package io.jnbd.client;

import io.jnbd.protocol.Nbd;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;

import static org.assertj.core.api.Assertions.assertThat;

/** The hand-over between the reader placing data and whoever decides a request's outcome. */
class PendingTest {

    private static Pending read() {
        Pending p = new Pending(Nbd.CMD_READ, 0, 0, 4096, ByteBuffer.allocate(4096), null, 1);
        assertThat(p.startSending()).isTrue();
        return p;
    }

    @Test
    void aRequestSettledWhileQueuedIsNeverSent() {
        Pending p = new Pending(Nbd.CMD_READ, 0, 0, 4096, ByteBuffer.allocate(4096), null, 1);
        assertThat(p.settle(new NbdTimeoutException("queued too long"))).isEqualTo(Pending.Settled.UNSENT);
        assertThat(p.startSending()).isFalse();
    }

    @Test
    void aReplyThatBeatsTheSenderIsDeliveredWhenTheSenderLetsGoOfThePayload() {
        Pending p = new Pending(Nbd.CMD_WRITE, 0, 0, 4096, ByteBuffer.allocate(4096), null, 1);
        assertThat(p.startSending()).isTrue();
        assertThat(p.claim()).as("the reader never places into a write's buffer").isFalse();
        assertThat(p.settle(null)).isEqualTo(Pending.Settled.HELD);
        assertThat(p.future).isNotDone();
        assertThat(p.release()).isNull();
        assertThat(p.settled()).isTrue();
    }

    @Test
    void anOutcomeDecidedWhileTheReaderPlacesDataIsHandedToTheReader() {
        Pending p = read();
        assertThat(p.claim()).isTrue();
        Exception timeout = new NbdTimeoutException("late");
        assertThat(p.settle(timeout)).isEqualTo(Pending.Settled.HELD);
        assertThat(p.heldSettled()).isTrue();
        assertThat(p.settle(new NbdException("second"))).isEqualTo(Pending.Settled.ALREADY);
        assertThat(p.release()).isSameAs(timeout);
        assertThat(p.claim()).as("no placing once settled").isFalse();
        assertThat(p.heldSettled()).isFalse();
    }

    @Test
    void anOutcomeDecidedBetweenChunksIsDeliveredAtOnceAndStopsFurtherPlacing() {
        Pending p = read();
        assertThat(p.claim()).isTrue();
        assertThat(p.release()).isSameAs(Pending.OPEN);
        assertThat(p.settle(null)).isEqualTo(Pending.Settled.NOW);
        assertThat(p.settled()).isTrue();
        assertThat(p.claim()).isFalse();
    }
}
