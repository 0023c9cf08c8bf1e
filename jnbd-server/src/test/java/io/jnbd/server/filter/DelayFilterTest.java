package io.jnbd.server.filter;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.backend.NbdErrorException;
import java.nio.ByteBuffer;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/**
 * The delay filter: nbdkit's keys and delay formats, each command waiting at least its own delay (lower bounds only:
 * a loaded machine may take longer), the asynchronous calls too, and a fast zero refused rather than delayed.
 */
class DelayFilterTest {
    private static final DelayFilterFactory FACTORY = new DelayFilterFactory();

    static Backend delay(Backend inner, String... keyValues) {
        Map<String, String> m = new LinkedHashMap<>();
        for (int i = 0; i < keyValues.length; i += 2) m.put(keyValues[i], keyValues[i + 1]);
        BackendOptions o = new BackendOptions(m);
        FACTORY.check(o);
        return FACTORY.wrap(inner, o);
    }

    @Test
    void delaysAreReadAsNbdkitReadsThem() {
        assertThat(DelayFilterFactory.parseDelay("k", "2")).isEqualTo(2_000_000_000L);
        assertThat(DelayFilterFactory.parseDelay("k", "1.5")).isEqualTo(1_500_000_000L);
        assertThat(DelayFilterFactory.parseDelay("k", "1.5s")).isEqualTo(1_500_000_000L);
        assertThat(DelayFilterFactory.parseDelay("k", "10ms")).isEqualTo(10_000_000L);
        assertThat(DelayFilterFactory.parseDelay("k", "500us")).isEqualTo(500_000L);
        assertThat(DelayFilterFactory.parseDelay("k", "1.2μs")).isEqualTo(1_200L);
        assertThat(DelayFilterFactory.parseDelay("k", "1000ns")).isEqualTo(1_000L);
        assertThat(DelayFilterFactory.parseDelay("k", "0")).isZero();
        assertThatThrownBy(() -> DelayFilterFactory.parseDelay("delay-read", "-5ms"))
            .hasMessage("delay-read=-5ms is not a delay (seconds, or with a unit: 2, 1.5s, 10ms, 500us, 1000ns)");
        assertThatThrownBy(() -> DelayFilterFactory.parseDelay("delay-read", "5 minutes")).hasMessageStartingWith("delay-read=5 minutes is not a delay");
        assertThatThrownBy(() -> DelayFilterFactory.parseDelay("wdelay", "3601")).hasMessage("wdelay=3601 is longer than the longest delay, 1 hour");
    }

    @Test
    void shortFormsAreTheLongOnesAndBothAtOnceIsAMistake() {
        EnumMap<Command, Long> d = DelayFilterFactory.delays(new BackendOptions(Map.of("rdelay", "5ms", "wdelay", "1", "delay-trim", "2ms")));
        assertThat(d).containsEntry(Command.READ, 5_000_000L).containsEntry(Command.WRITE, 1_000_000_000L)
            .containsEntry(Command.TRIM, 2_000_000L).containsEntry(Command.ZERO, 0L).containsEntry(Command.FLUSH, 0L);
        assertThatThrownBy(() -> FACTORY.check(new BackendOptions(Map.of("rdelay", "5ms", "delay-read", "5ms"))))
            .hasMessage("rdelay= and delay-read= are the same key; give one");
        assertThatThrownBy(() -> FACTORY.check(new BackendOptions(Map.of("delay-fast-zero", "maybe"))))
            .hasMessageStartingWith("delay-fast-zero must be true or false");
        assertThat(FACTORY.describe(new BackendOptions(Map.of("delay-read", "5ms")))).isEqualTo("delay(read 5ms)");
        assertThat(FACTORY.describe(new BackendOptions(Map.of("wdelay", "1.5")))).isEqualTo("delay(write 1.5s)");
        assertThat(FACTORY.describe(BackendOptions.none())).isEqualTo("delay(none)");
    }

    @Test
    void eachCommandWaitsAtLeastItsOwnDelay() throws Exception {
        Backend b = delay(new MemoryBackend(1 << 20), "delay-read", "150ms", "delay-write", "200ms", "delay-zero", "120ms",
            "delay-trim", "130ms", "delay-extents", "140ms", "delay-cache", "110ms", "delay-flush", "160ms");
        assertThat(millis(() -> b.read(0, ByteBuffer.allocate(512)))).isGreaterThanOrEqualTo(150);
        assertThat(millis(() -> b.write(0, ByteBuffer.allocate(512), false))).isGreaterThanOrEqualTo(200);
        assertThat(millis(() -> b.write(0, new ByteBuffer[] {ByteBuffer.allocate(512)}, false))).isGreaterThanOrEqualTo(200);
        assertThat(millis(() -> b.zero(0, 512, false, false, false))).isGreaterThanOrEqualTo(120);
        assertThat(millis(() -> b.trim(0, 512, false))).isGreaterThanOrEqualTo(130);
        assertThat(millis(() -> b.extents(0, 512))).isGreaterThanOrEqualTo(140);
        assertThat(millis(() -> b.cache(0, 512))).isGreaterThanOrEqualTo(110);
        assertThat(millis(b::flush)).isGreaterThanOrEqualTo(160);
    }

    @Test
    void asynchronousCallsStartOnlyAfterTheDelayAndHoldNoThread() throws Exception {
        AsyncMemory inner = new AsyncMemory(1 << 20);
        Backend b = delay(inner, "rdelay", "200ms", "wdelay", "200ms");
        assertThat(b.traits()).as("ASYNC kept; ZERO_COPY and NEVER_BLOCKS dropped").containsExactlyInAnyOrder(Backend.Trait.ASYNC, Backend.Trait.DIRECT_IO);
        long start = System.nanoTime();
        CompletableFuture<Void> w = b.writeAsync(4096, new ByteBuffer[] {ByteBuffer.wrap(new byte[] {9, 8, 7})}, false);
        assertThat(inner.asyncCalls.get()).as("the call returned before the delay, without starting the inner call").isZero();
        w.get();
        assertThat((System.nanoTime() - start) / 1_000_000).isGreaterThanOrEqualTo(200);
        ByteBuffer back = ByteBuffer.allocate(3);
        start = System.nanoTime();
        b.readAsync(4096, back).get();
        assertThat((System.nanoTime() - start) / 1_000_000).isGreaterThanOrEqualTo(200);
        assertThat(back.array()).containsExactly(9, 8, 7);
        assertThat(inner.asyncCalls.get()).isEqualTo(2);
    }

    @Test
    void aFastZeroIsRefusedAtOnceWhereZeroesAreDelayedUnlessAskedOtherwise() throws Exception {
        Backend b = delay(new MemoryBackend(1 << 20), "delay-zero", "10s");
        assertThatThrownBy(() -> b.zero(0, 512, false, true, false))
            .isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.ENOTSUP));
        Backend slow = delay(new MemoryBackend(1 << 20), "delay-zero", "100ms", "delay-fast-zero", "false");
        assertThat(millis(() -> slow.zero(0, 512, false, true, false))).isGreaterThanOrEqualTo(100);
        Backend undelayed = delay(new MemoryBackend(1 << 20), "delay-read", "1ms");
        undelayed.zero(0, 512, false, true, false);
    }

    interface Call {
        void run() throws Exception;
    }

    private static long millis(Call c) throws Exception {
        long start = System.nanoTime();
        c.run();
        return (System.nanoTime() - start) / 1_000_000;
    }
}
