package io.jnbd.tls;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.security.Security;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * 64 MiB each way at once, each end reading on one thread while it writes on another (as the server's connection
 * reader and reply writer do), with gathering writes of random sizes and reads into small and large buffers. In
 * this module's tests the JDK updates its keys every MiB (see the pom), so TLS 1.3 sessions go through some 128
 * KeyUpdates, each answered while both directions are full.
 */
@Timeout(300)
class BulkTransferTest {
    private static final long SIZE = 64L << 20;

    @TempDir
    static Path dir;

    @BeforeAll
    static void pki() {
        Setup.prepare(dir);
    }

    @Test
    void keyUpdatesAreForcedInThisModule() {
        assertThat(Security.getProperty("jdk.tls.keyLimits")).as("key-update.security read through the surefire argLine")
            .contains("AES/GCM/NoPadding KeyUpdate 2^20");
    }

    @ParameterizedTest
    @EnumSource(Setup.class)
    void sixtyFourMibEachWayConcurrently(Setup setup) throws Exception {
        try (Loopback net = Loopback.open(); var s = net.handshake(setup.server(dir), setup.client(dir));
             ExecutorService threads = Executors.newFixedThreadPool(4)) {
            List<Future<Long>> done = new ArrayList<>();
            done.add(threads.submit(writer(s.client(), 1)));
            done.add(threads.submit(writer(s.server(), 2)));
            done.add(threads.submit(reader(s.server(), 1)));
            done.add(threads.submit(reader(s.client(), 2)));
            for (Future<Long> f : done) assertThat(f.get()).isEqualTo(SIZE);
        }
    }

    /** The byte at {@code offset} of stream {@code stream}: position-dependent, so a lost or repeated record shows. */
    static byte expected(int stream, long offset) {
        long x = (offset >>> 3) * 0x9E3779B97F4A7C15L + stream;
        return (byte) ((x >>> 40) ^ offset);
    }

    static Callable<Long> writer(SecureChannel c, int stream) {
        return () -> {
            SplittableRandom random = new SplittableRandom(stream);
            ByteBuffer a = ByteBuffer.allocateDirect(1 << 20);
            ByteBuffer b = ByteBuffer.allocate(64 << 10);
            long offset = 0;
            while (offset < SIZE) {
                // A header-sized piece and a payload, as a reply goes out, of random sizes.
                int first = (int) Math.min(random.nextInt(1, b.capacity()), SIZE - offset);
                int second = (int) Math.min(random.nextInt(0, a.capacity()), SIZE - offset - first);
                b.clear().limit(first);
                for (int i = 0; i < first; i++) b.put(i, expected(stream, offset + i));
                a.clear().limit(second);
                for (int i = 0; i < second; i++) a.put(i, expected(stream, offset + first + i));
                c.write(b, a);
                offset += first + second;
            }
            return offset;
        };
    }

    static Callable<Long> reader(SecureChannel c, int stream) {
        return () -> {
            SplittableRandom random = new SplittableRandom(stream * 31L);
            ByteBuffer small = ByteBuffer.allocate(1000);
            ByteBuffer large = ByteBuffer.allocateDirect(256 << 10);
            long offset = 0;
            while (offset < SIZE) {
                ByteBuffer dst = random.nextBoolean() ? small : large;
                dst.clear();
                if (dst.capacity() > SIZE - offset) dst.limit((int) (SIZE - offset));
                int n = c.read(dst);
                if (n < 0) break;
                for (int i = 0; i < n; i++) {
                    if (dst.get(i) != expected(stream, offset + i)) {
                        throw new AssertionError("stream " + stream + " differs at byte " + (offset + i));
                    }
                }
                offset += n;
            }
            return offset;
        };
    }
}
