package io.jnbd.client;

import io.jnbd.protocol.Nbd;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;

import static org.assertj.core.api.Assertions.assertThat;

/** The hand-over between the reader placing data and whoever decides a request's outcome. */
class PendingTest {

    private static Pending read() {
        return new Pending(Nbd.CMD_READ, 0, 0, 4096, ByteBuffer.allocate(4096), 1);
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
