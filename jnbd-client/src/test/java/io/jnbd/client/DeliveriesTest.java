package io.jnbd.client;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/** Deliveries made while a lock of the client is held wait until the thread holds none. */
class DeliveriesTest {

    @Test
    void aDeliveryWithNoLockHeldRunsAtOnce() {
        assertThat(Deliveries.ofHoldingThread()).isNull();
    }

    @Test
    void aDeliveryMadeUnderNestedLocksRunsWhenTheLastIsLetGo() {
        List<String> ran = new ArrayList<>();
        Deliveries.locked();
        Deliveries.locked(); // e.g. a splice: the destination's sender lock, then the source's
        Deliveries.ofHoldingThread().add(() -> ran.add("first"));
        Deliveries.unlocked();
        assertThat(ran).isEmpty();
        Deliveries.ofHoldingThread().add(() -> ran.add("second"));
        Deliveries.unlocked();
        assertThat(ran).containsExactly("first", "second");
        assertThat(Deliveries.ofHoldingThread()).isNull();
    }

    @Test
    void aCallbackRunAtTheReleaseMayTakeALockAndDeliverAgain() {
        List<String> ran = new ArrayList<>();
        Deliveries.locked();
        Deliveries.ofHoldingThread().add(() -> {
            ran.add("callback");
            // The callback submits: a lock taken and let go, delivering on the way.
            Deliveries.locked();
            Deliveries.ofHoldingThread().add(() -> ran.add("its own"));
            Deliveries.unlocked();
        });
        Deliveries.ofHoldingThread().add(() -> ran.add("next"));
        Deliveries.unlocked();
        assertThat(ran).containsExactlyInAnyOrder("callback", "its own", "next");
        assertThat(ran.getFirst()).isEqualTo("callback");
        assertThat(Deliveries.ofHoldingThread()).isNull();
    }

    @Test
    void aThreadThatHandsOffNeverDeliversOnItself() throws Exception {
        CompletableFuture<String> underLock = new CompletableFuture<>();
        CompletableFuture<String> withoutLock = new CompletableFuture<>();
        Thread sender = Thread.ofPlatform().name("a-sender").start(() -> {
            Deliveries.handOffFromThisThread("its-completions");
            Deliveries.locked();
            Deliveries.ofHoldingThread().add(() -> underLock.complete(Thread.currentThread().getName()));
            Deliveries.unlocked();
            Deliveries.ofHoldingThread().add(() -> withoutLock.complete(Thread.currentThread().getName()));
        });
        sender.join(10_000);
        assertThat(underLock.get(10, TimeUnit.SECONDS)).isEqualTo("its-completions");
        assertThat(withoutLock.get(10, TimeUnit.SECONDS)).isEqualTo("its-completions");
    }
}
