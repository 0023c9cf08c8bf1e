package io.jnbd.server.filter;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.FileBackend;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.backend.NbdErrorException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The rate filter: nbdkit's keys and its way of reading a rate, reads and writes in buckets of their own, the
 * export's bucket shared by every connection and each connection's its own, rate files, and the calls that wait. The
 * waits are computed on a clock the test steps; only the few calls that really wait run on the real one.
 */
class RateFilterTest {
    private static final RateFilterFactory FACTORY = new RateFilterFactory();
    private static final long SECOND = 1_000_000_000L;
    /** Where a wait comes from a fraction of a second of refill: the arithmetic is in doubles. */
    private static final org.assertj.core.data.Offset<Long> NS = org.assertj.core.data.Offset.offset(2L);

    @TempDir
    Path dir;

    static BackendOptions options(String... keyValues) {
        Map<String, String> m = new LinkedHashMap<>();
        for (int i = 0; i < keyValues.length; i += 2) m.put(keyValues[i], keyValues[i + 1]);
        BackendOptions o = new BackendOptions(m);
        FACTORY.check(o);
        return o;
    }

    static RateFilter rate(Backend inner, AtomicLong clock, String... keyValues) {
        return FACTORY.wrap(inner, options(keyValues), clock::get);
    }

    @Test
    void ratesAreReadAsNbdkitReadsSizesInPowersOf1024() {
        assertThat(RateFilterFactory.parseBits("rate", "800M")).isEqualTo(800L << 20);
        assertThat(RateFilterFactory.parseBits("rate", "1k")).isEqualTo(1024);
        assertThat(RateFilterFactory.parseBits("rate", "50K")).isEqualTo(50 * 1024);
        assertThat(RateFilterFactory.parseBits("rate", "2g")).isEqualTo(2L << 30);
        assertThat(RateFilterFactory.parseBits("rate", "1T")).isEqualTo(1L << 40);
        assertThat(RateFilterFactory.parseBits("rate", "1P")).isEqualTo(1L << 50);
        assertThat(RateFilterFactory.parseBits("rate", "7E")).isEqualTo(7L << 60);
        assertThat(RateFilterFactory.parseBits("rate", "1b")).isEqualTo(1);
        assertThat(RateFilterFactory.parseBits("rate", "2S")).as("nbdkit's sectors").isEqualTo(1024);
        assertThat(RateFilterFactory.parseBits("rate", "+1M")).isEqualTo(1L << 20);
        assertThat(RateFilterFactory.parseBits("rate", " 08")).isEqualTo(8);
        assertThat(RateFilterFactory.parseBits("rate", "1000000")).isEqualTo(1_000_000);
        assertThat(RateFilterFactory.parseBits("rate", "0")).isZero();
        assertThat(RateFilterFactory.parseBits("rate", "-0")).isZero();
        for (String bad : new String[] {"", "M", "garbage", "0x10", "1.5M", "1MB", "1MiB", "1Mbps", "800 M", "1KK"}) {
            assertThatThrownBy(() -> RateFilterFactory.parseBits("rate", bad)).as(bad)
                .hasMessage("rate=" + bad + " is not a rate in bits per second (a whole number, with K, M, G, T, P or E for powers of 1024: 800M)");
        }
        assertThatThrownBy(() -> RateFilterFactory.parseBits("rate", "-1")).hasMessage("rate=-1: a rate cannot be negative");
        assertThatThrownBy(() -> RateFilterFactory.parseBits("rate", "8E")).hasMessage("rate=8E is past the largest rate");
        assertThatThrownBy(() -> RateFilterFactory.parseBits("rate", "9223372036854775808")).hasMessageEndingWith("is past the largest rate");
        assertThat(RateFilterFactory.text(800L << 20)).isEqualTo("800M");
        assertThat(RateFilterFactory.text(1_000_000)).isEqualTo("1000000");
        assertThat(RateFilterFactory.text(3L << 30)).isEqualTo("3G");
        assertThat(RateFilterFactory.text(1536)).isEqualTo("1536");
    }

    @Test
    void aMistakeInAKeyIsOneLineNamingIt() throws Exception {
        assertThatThrownBy(() -> options("rate", "0")).hasMessage("rate=0: the rate must be above 0 (leave rate= out for no limit)");
        assertThatThrownBy(() -> options("connection-rate", "0K"))
            .hasMessage("connection-rate=0K: the rate must be above 0 (leave connection-rate= out for no limit)");
        assertThatThrownBy(() -> options("connection-rate", "-5M")).hasMessage("connection-rate=-5M: a rate cannot be negative");
        assertThatThrownBy(() -> options("rate", "fast")).hasMessageStartingWith("rate=fast is not a rate in bits per second");
        for (String b : new String[] {"0", "-1", "soon", "NaN", "Infinity", "3601"}) {
            assertThatThrownBy(() -> options("burstiness", b)).as(b)
                .hasMessage("burstiness=" + b + " is not a number of seconds above 0 and up to 3600 (default 2.0)");
        }
        assertThat(RateFilterFactory.burstiness(options("burstiness", "0.5"))).isEqualTo(0.5);
        assertThat(RateFilterFactory.burstiness(options())).isEqualTo(2.0);

        Path missing = dir.resolve("missing");
        assertThatThrownBy(() -> options("rate-file", missing.toString()))
            .hasMessage("rate-file=" + missing + ": no such file, and no rate= to start from");
        assertThatThrownBy(() -> options("connection-rate-file", missing.toString()))
            .hasMessage("connection-rate-file=" + missing + ": no such file, and no connection-rate= to start from");
        options("rate", "1M", "rate-file", missing.toString()); // nbdkit's own example: the file may come later
        Path garbage = Files.writeString(dir.resolve("garbage"), "lots\n");
        assertThatThrownBy(() -> options("rate-file", garbage.toString()))
            .hasMessage("rate-file=" + garbage + " holds 'lots', not a rate in bits per second");
        assertThatThrownBy(() -> options("rate", "1M", "rate-file", "/dev/zero")).as("its first bytes only, not forever")
            .hasMessage("rate-file=/dev/zero does not hold a rate in bits per second");
        assertThatThrownBy(() -> options("rate", "1M", "rate-file", dir.toString()))
            .hasMessage("rate-file=" + dir + " is a directory, not a file holding a rate");
    }

    @Test
    void checkDescribesTheLimits() throws Exception {
        assertThat(FACTORY.describe(options("rate", "800M"))).isEqualTo("rate(800M bits/s for the export)");
        assertThat(FACTORY.describe(options("connection-rate", "50K", "rate", "1M", "burstiness", "4")))
            .isEqualTo("rate(1M bits/s for the export, 50K bits/s per connection, burstiness 4s)");
        Path f = Files.writeString(dir.resolve("r"), "2M\n");
        assertThat(FACTORY.describe(options("connection-rate-file", f.toString())))
            .isEqualTo("rate(as " + f + " says per connection)");
        assertThat(FACTORY.describe(options("rate", "1M", "rate-file", f.toString())))
            .isEqualTo("rate(1M bits/s or as " + f + " says for the export)");
        assertThat(FACTORY.describe(options())).isEqualTo("rate(none)");
    }

    @Test
    void readsAndWritesEachHaveTheirBucketAndNothingElseCounts() throws Exception {
        AtomicLong clock = new AtomicLong();
        // 8K bits/s is 1 KiB/s; one second of burst.
        RateFilter r = rate(new MemoryBackend(1 << 20), clock, "rate", "8K", "burstiness", "1");
        byte[] data = new byte[1024];
        java.util.Arrays.fill(data, (byte) 7);
        r.write(0, ByteBuffer.wrap(data), false);
        ByteBuffer back = ByteBuffer.allocate(1024);
        r.read(0, back);
        assertThat(back.array()).isEqualTo(data);
        assertThat(r.takeRead(1024)).as("the read bucket is empty now: 1 KiB waits a second").isEqualTo(SECOND);
        assertThat(r.takeWrite(512)).as("and the write bucket, as empty, on its own").isEqualTo(SECOND / 2);
        r.zero(0, 1 << 20, false, false, false);
        r.trim(0, 1 << 20, false);
        r.cache(0, 1 << 20);
        r.flush();
        r.extents(0, 1 << 20);
        assertThat(r.bytesRead()).isEqualTo(2048);
        assertThat(r.bytesWritten()).as("zeroes and trims move no data: nbdkit counts only reads and writes").isEqualTo(1536);
        clock.addAndGet(3 * SECOND);
        assertThat(r.takeRead(1024)).as("the debt paid, and a full bucket again").isZero();
    }

    @Test
    void everyConnectionHasItsOwnBucketAndSharesTheExports() {
        AtomicLong clock = new AtomicLong();
        RateFilter chain = rate(new MemoryBackend(1 << 20), clock, "connection-rate", "8K", "burstiness", "1", "rate", "16K");
        RateFilter a = (RateFilter) chain.forConnection(io.jnbd.server.backend.ConnectionContext.NONE), b = (RateFilter) chain.forConnection(io.jnbd.server.backend.ConnectionContext.NONE);
        assertThat(a).isNotSameAs(b).isNotSameAs(chain);
        assertThat(a.traits()).isEqualTo(chain.traits());
        assertThat(a.takeRead(1024)).as("a's bucket and the export's both held it").isZero();
        assertThat(a.takeRead(1024)).as("a's bucket is empty: a second; the export's still held it").isEqualTo(SECOND);
        assertThat(b.takeRead(1024)).as("b's own bucket is full, but the export's is now 1 KiB in debt at 2 KiB/s")
            .isEqualTo(SECOND / 2);
        assertThat(chain.bytesRead()).as("counted for the export, whichever connection").isEqualTo(3072);
        assertThat(b.bytesRead()).isEqualTo(3072);
        a.connectionClosed();
        b.connectionClosed();

        RateFilter exportOnly = rate(new MemoryBackend(1 << 20), clock, "rate", "8K");
        assertThat(exportOnly.forConnection(io.jnbd.server.backend.ConnectionContext.NONE)).as("no connection limit: nothing of its own per connection").isSameAs(exportOnly);
    }

    @Test
    void aRateFileIsReadAgainAfterATenthOfASecondAndItsLastGoodRateStays() throws Exception {
        AtomicLong clock = new AtomicLong(5 * SECOND);
        Path file = Files.writeString(dir.resolve("rate"), "8K\n");
        RateFilter r = rate(new MemoryBackend(1 << 20), clock, "rate", "1M", "rate-file", file.toString(), "burstiness", "1");
        assertThat(r.takeRead(1024)).as("the file's rate from the start: its one-second bucket").isZero();
        assertThat(r.takeRead(1024)).isEqualTo(SECOND);

        Files.writeString(dir.resolve("next"), "16K\n");
        Files.move(dir.resolve("next"), file, java.nio.file.StandardCopyOption.ATOMIC_MOVE, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        clock.addAndGet(RateSource.REREAD_NANOS - 1);
        assertThat(r.takeRead(0)).as("not read again yet: the debt at 8K").isCloseTo(SECOND - (RateSource.REREAD_NANOS - 1), NS);
        clock.addAndGet(1);
        assertThat(r.takeRead(0)).as("read again: what is left of the debt is paid at 16K")
            .isCloseTo((SECOND - RateSource.REREAD_NANOS) / 2, NS);

        Files.delete(file);
        clock.addAndGet(10 * SECOND);
        r.takeRead(2048); // refilled to 2 KiB (one second at 16K): empty now
        assertThat(r.takeRead(2048)).as("a deleted file leaves its last rate").isEqualTo(SECOND);
        Files.writeString(file, "garbage\n");
        clock.addAndGet(RateSource.REREAD_NANOS);
        assertThat(r.takeRead(2048)).as("and so does one that holds no rate").isCloseTo(2 * SECOND - RateSource.REREAD_NANOS, NS);
        Files.writeString(file, "0\n");
        clock.addAndGet(RateSource.REREAD_NANOS);
        assertThat(r.takeRead(1 << 20)).as("0: no limit, as nbdkit's file may say").isZero();
    }

    @Test
    void aMissingRateFileLeavesTheKeysRateUntilItAppears() throws Exception {
        AtomicLong clock = new AtomicLong();
        Path file = dir.resolve("later");
        RateFilter r = rate(new MemoryBackend(1 << 20), clock, "connection-rate", "8K", "connection-rate-file", file.toString(),
            "burstiness", "1");
        RateFilter c = (RateFilter) r.forConnection(io.jnbd.server.backend.ConnectionContext.NONE);
        assertThat(c.takeRead(2048)).as("8K from the key").isEqualTo(SECOND);
        Files.writeString(file, "16K");
        clock.addAndGet(RateSource.REREAD_NANOS);
        assertThat(c.takeRead(0)).isCloseTo((SECOND - RateSource.REREAD_NANOS) / 2, NS);
    }

    @Test
    void asynchronousCallsStartWhenTheBucketsAllowAndHoldNoThread() throws Exception {
        AsyncMemory inner = new AsyncMemory(1 << 20);
        AtomicLong clock = new AtomicLong();
        RateFilter r = rate(inner, clock, "rate", "8K", "burstiness", "1");
        assertThat(r.traits()).as("ASYNC kept; ZERO_COPY and NEVER_BLOCKS dropped").containsExactlyInAnyOrder(Backend.Trait.ASYNC, Backend.Trait.DIRECT_IO);
        r.writeAsync(0, new ByteBuffer[] {ByteBuffer.wrap(new byte[] {1, 2, 3})}, false).get();
        assertThat(inner.asyncCalls).as("the bucket held it: started at once").hasValue(1);
        r.takeWrite(1021 + 1024); // empty, and 1 KiB in debt: a write now waits a second (on the real clock's timer)
        CompletableFuture<Void> w = r.writeAsync(8, new ByteBuffer[] {ByteBuffer.wrap(new byte[] {4, 5})}, false);
        assertThat(inner.asyncCalls).as("returned without starting the inner call").hasValue(1);
        w.get();
        assertThat(inner.asyncCalls).hasValue(2);
        ByteBuffer back = ByteBuffer.allocate(10);
        r.readAsync(0, back).get();
        assertThat(back.array()).containsExactly(1, 2, 3, 0, 0, 0, 0, 0, 4, 5);
        assertThat(r.bytesWritten()).isEqualTo(3 + 2045 + 2);
        assertThat(r.bytesRead()).isEqualTo(10);
    }

    @Test
    void aZeroCopyFileIsReadThroughTheFilterNotBesideIt() throws Exception {
        try (FileBackend file = new FileBackend(dir.resolve("f.img"), FileBackend.Mode.CACHED, false, 1 << 20)) {
            assertThat(file.has(Backend.Trait.ZERO_COPY)).isTrue();
            RateFilter r = FACTORY.wrap(file, options("rate", "1G"), System::nanoTime);
            assertThat(r.has(Backend.Trait.ZERO_COPY)).isFalse();
            assertThat(r.pageCache()).as("sendfile would skip the buckets").isNull();
            assertThat(FACTORY.traits(file.traits())).isEqualTo(r.traits());
        }
    }

    @Test
    void aWaitInterruptedByTheServerStoppingIsEshutdown() throws Exception {
        // 8 bits/s: a read of 4 KiB would wait more than an hour.
        RateFilter r = FACTORY.wrap(new MemoryBackend(1 << 20), options("rate", "8", "burstiness", "1"), System::nanoTime);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread t = Thread.ofPlatform().start(() -> {
            try {
                r.read(0, ByteBuffer.allocate(4096));
            } catch (Throwable e) {
                failure.set(e);
            }
        });
        t.interrupt();
        t.join(30_000);
        assertThat(t.isAlive()).isFalse();
        assertThat(failure.get()).isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.ESHUTDOWN));
    }
}
