package io.jnbd.server.filter;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.BackendOptions;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.backend.NbdErrorException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The error filter against nbdkit's rules: which calls fail, with which error, and that a failed call does nothing. */
class ErrorFilterTest {
    private static final ErrorFilterFactory FACTORY = new ErrorFilterFactory();

    @TempDir
    Path dir;

    static Backend error(Backend inner, String... keyValues) {
        Map<String, String> m = new LinkedHashMap<>();
        for (int i = 0; i < keyValues.length; i += 2) m.put(keyValues[i], keyValues[i + 1]);
        BackendOptions o = new BackendOptions(m);
        FACTORY.check(o);
        return FACTORY.wrap(inner, o);
    }

    /** The error each command fails with (0: it went through), in the order of {@link Command}. */
    static List<Integer> outcomes(Backend b) {
        List<Integer> out = new ArrayList<>();
        out.add(errorOf(() -> b.read(0, ByteBuffer.allocate(512))));
        out.add(errorOf(() -> b.write(0, ByteBuffer.allocate(512), false)));
        out.add(errorOf(() -> b.zero(0, 512, false, false, false)));
        out.add(errorOf(() -> b.trim(0, 512, false)));
        out.add(errorOf(() -> b.extents(0, 512)));
        out.add(errorOf(() -> b.cache(0, 512)));
        out.add(errorOf(b::flush));
        return out;
    }

    interface Call {
        void run() throws IOException;
    }

    static int errorOf(Call c) {
        try {
            c.run();
            return 0;
        } catch (NbdErrorException e) {
            return e.error();
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }

    @Test
    void rateOneFailsEveryCallWithTheConfiguredError() {
        Backend b = error(new MemoryBackend(1 << 20), "error", "ENOSPC", "error-rate", "100%");
        assertThat(outcomes(b)).containsOnly(Nbd.ENOSPC).hasSize(Command.values().length);
        assertThat(outcomes(error(new MemoryBackend(1 << 20), "error-rate", "1"))).as("EIO by default").containsOnly(Nbd.EIO);
    }

    @Test
    void aCommandsOwnKeysWinOverTheGeneralOnesAndOnlyItFails() {
        Backend b = error(new MemoryBackend(1 << 20), "error-pwrite-rate", "1:1", "error-pwrite", "EPERM", "error", "ENOMEM");
        // read, write, zero, trim, extents, cache, flush
        assertThat(outcomes(b)).containsExactly(0, Nbd.EPERM, 0, 0, 0, 0, 0);
        Backend c = error(new MemoryBackend(1 << 20), "error-rate", "100%", "error-pread-rate", "0%", "error-zero", "EINVAL");
        assertThat(outcomes(c)).containsExactly(0, Nbd.EIO, Nbd.EINVAL, Nbd.EIO, Nbd.EIO, Nbd.EIO, Nbd.EIO);
    }

    @Test
    void rateZeroOrNoRateFailsNothing() {
        assertThat(outcomes(error(new MemoryBackend(1 << 20)))).containsOnly(0);
        assertThat(outcomes(error(new MemoryBackend(1 << 20), "error", "ENOSPC", "error-rate", "0"))).containsOnly(0);
    }

    @Test
    void aFailedWriteLeavesTheDataAsItWas() throws IOException {
        MemoryBackend memory = new MemoryBackend(1 << 20);
        memory.write(0, ByteBuffer.wrap(new byte[] {7, 7, 7, 7}), false);
        Backend b = error(memory, "error-pwrite-rate", "100%", "error-zero-rate", "100%", "error-trim-rate", "100%");
        assertThat(errorOf(() -> b.write(0, ByteBuffer.wrap(new byte[4]), false))).isEqualTo(Nbd.EIO);
        assertThat(errorOf(() -> b.write(0, new ByteBuffer[] {ByteBuffer.wrap(new byte[4])}, true))).isEqualTo(Nbd.EIO);
        assertThat(errorOf(() -> b.zero(0, 4, true, false, false))).isEqualTo(Nbd.EIO);
        assertThat(errorOf(() -> b.trim(0, 4, false))).isEqualTo(Nbd.EIO);
        ByteBuffer back = ByteBuffer.allocate(4);
        b.read(0, back);
        assertThat(back.array()).containsExactly(7, 7, 7, 7);
    }

    @Test
    void aRangeFailsExactlyTheRequestsThatTouchIt() {
        Backend b = error(new MemoryBackend(1 << 20), "error-rate", "100%", "error-offset", "8K", "error-length", "4K");
        assertThat(readError(b, 0, 8192)).as("ends where the range starts").isZero();
        assertThat(readError(b, 0, 8193)).as("its last byte is the range's first").isEqualTo(Nbd.EIO);
        assertThat(readError(b, 8192 + 4095, 1)).as("the range's last byte").isEqualTo(Nbd.EIO);
        assertThat(readError(b, 12288, 4096)).as("starts where the range ends").isZero();
        assertThat(readError(b, 4096, 16384)).as("covers it").isEqualTo(Nbd.EIO);
        assertThat(errorOf(() -> b.write(10000, ByteBuffer.allocate(10), false))).isEqualTo(Nbd.EIO);
        assertThat(errorOf(() -> b.zero(100_000, 10, false, false, false))).isZero();
        assertThat(errorOf(b::flush)).as("a flush touches no range").isZero();
        Backend fromOffset = error(new MemoryBackend(1 << 20), "error-rate", "1", "error-offset", "1M");
        assertThat(readError(fromOffset, (1 << 20) - 512, 512)).isZero();
        Backend toLength = error(new MemoryBackend(1 << 20), "error-rate", "1", "error-length", "512");
        assertThat(readError(toLength, 0, 1)).isEqualTo(Nbd.EIO);
        assertThat(readError(toLength, 512, 512)).isZero();
    }

    private static int readError(Backend b, long offset, int length) {
        return errorOf(() -> b.read(offset, ByteBuffer.allocate(length)));
    }

    @Test
    void errorsComeOnlyWhileTheErrorFileExists() throws IOException {
        Path inject = dir.resolve("inject");
        Path writes = dir.resolve("writes");
        Backend b = error(new MemoryBackend(1 << 20), "error-rate", "100%", "error-file", inject.toString(), "error-pwrite-file", writes.toString());
        assertThat(outcomes(b)).containsOnly(0);
        Files.createFile(inject);
        assertThat(outcomes(b)).containsExactly(Nbd.EIO, 0, Nbd.EIO, Nbd.EIO, Nbd.EIO, Nbd.EIO, Nbd.EIO);
        Files.createFile(writes);
        assertThat(outcomes(b)).containsOnly(Nbd.EIO);
        Files.delete(inject);
        assertThat(outcomes(b)).containsExactly(0, Nbd.EIO, 0, 0, 0, 0, 0);
    }

    @Test
    void theSameSeedFailsTheSameCalls() {
        boolean[] first = failures(error(new MemoryBackend(1 << 20), "error-pread-rate", "30%", "error-seed", "42"));
        boolean[] again = failures(error(new MemoryBackend(1 << 20), "error-pread-rate", "30%", "error-seed", "42"));
        assertThat(again).isEqualTo(first);
        int failed = 0;
        for (boolean f : first) failed += f ? 1 : 0;
        assertThat(failed).as("about 30% of 1000 reads").isBetween(200, 400);
    }

    private static boolean[] failures(Backend b) {
        boolean[] out = new boolean[1000];
        for (int i = 0; i < out.length; i++) out[i] = readError(b, 0, 512) != 0;
        return out;
    }

    @Test
    void asynchronousCallsFailAlikeAndTheInnersTraitsAreKeptOnlyWhereSafe() throws Exception {
        AsyncMemory inner = new AsyncMemory(1 << 20);
        Backend b = error(inner, "error", "ESHUTDOWN", "error-pread-rate", "100%");
        assertThat(b.traits()).as("failing reads drops sendfile; failing waits for nothing, so never-blocking stays")
            .containsExactlyInAnyOrder(Backend.Trait.ASYNC, Backend.Trait.DIRECT_IO, Backend.Trait.NEVER_BLOCKS);
        assertThatThrownBy(() -> b.readAsync(0, ByteBuffer.allocate(512)).get()).isInstanceOf(ExecutionException.class)
            .cause().isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.ESHUTDOWN));
        b.writeAsync(0, new ByteBuffer[] {ByteBuffer.wrap(new byte[] {1, 2, 3})}, false).get();
        assertThat(inner.asyncCalls.get()).as("the write went down asynchronously; the read did not go down").isEqualTo(1);
        assertThat(error(new MemoryBackend(4096)).traits()).as("failing nothing, it keeps everything").isEqualTo(new MemoryBackend(4096).traits());
        assertThat(error(new MemoryBackend(4096), "error-rate", "1", "error-file", "/nonexistent").traits())
            .as("looking for a file on every call may wait: never-blocking is dropped").doesNotContain(Backend.Trait.NEVER_BLOCKS);
    }

    @Test
    void badValuesAreOneLineNamingTheKey() {
        assertThatThrownBy(() -> error(new MemoryBackend(4096), "error", "EBADF"))
            .hasMessage("error=EBADF is not an NBD error (EPERM, EIO, ENOMEM, EINVAL, ENOSPC, EOVERFLOW, ENOTSUP, ESHUTDOWN)");
        assertThatThrownBy(() -> error(new MemoryBackend(4096), "error-pwrite-rate", "150%"))
            .hasMessage("error-pwrite-rate=150% is not a rate from 0 to 1 (10%, 0.1 or 1:10)");
        assertThatThrownBy(() -> error(new MemoryBackend(4096), "error-rate", "often")).hasMessageStartingWith("error-rate=often is not a rate");
        assertThatThrownBy(() -> error(new MemoryBackend(4096), "error-seed", "x")).hasMessage("error-seed=x is not a whole number");
        assertThatThrownBy(() -> error(new MemoryBackend(4096), "error-length", "0")).hasMessageStartingWith("error-length=0 would fail nothing");
        assertThat(ErrorFilterFactory.rate(new BackendOptions(Map.of("r", "1:4")), "r", 0)).isEqualTo(0.25);
    }

    @Test
    void itDescribesWhatItFails() {
        assertThat(FACTORY.describe(new BackendOptions(Map.of("error-rate", "10%")))).isEqualTo("error(EIO 10%)");
        Map<String, String> m = new LinkedHashMap<>();
        m.put("error", "ENOSPC");
        m.put("error-pwrite-rate", "1");
        m.put("error-zero-rate", "1");
        m.put("error-offset", "4096");
        m.put("error-length", "512");
        assertThat(FACTORY.describe(new BackendOptions(m))).isEqualTo("error(pwrite/zero ENOSPC 100%, bytes 4096-4607)");
        assertThat(Arrays.asList(FACTORY.options().toArray())).contains("error-flush-rate", "error-cache-file", "error-extents");
    }
}
