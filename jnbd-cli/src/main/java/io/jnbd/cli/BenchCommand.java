package io.jnbd.cli;

import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;
import io.jnbd.server.ExportSpec;
import java.net.URI;
import java.nio.ByteBuffer;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.HdrHistogram.Histogram;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/** A load generator on the jnbd client, for machines without fio. */
@Command(name = "bench", mixinStandardHelpOptions = true, sortOptions = false,
    description = {
        "Drive an NBD export with a fixed number of requests in flight and report throughput and latency.",
        "Writes destroy the export's contents in the range used.",
        "",
        "URI is nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH, or with TLS",
        "nbds://HOST[:PORT]/EXPORT?tls-certificates=DIR (also tls-psk-file=FILE,",
        "tls-verify-peer=false, tls-hostname=NAME, user@HOST for the PSK identity).", ""},
    footer = {"", "Examples:",
        "  jnbd bench nbd://127.0.0.1:10809/default                       # 4k random reads, depth 32, 10 s",
        "  jnbd bench --rw read --bs 1M --depth 8 nbd://127.0.0.1:10809/default",
        "  jnbd bench --rw randrw --mix 70 --bs 16k --depth 16 --duration 30 nbd+unix:///disk?socket=/tmp/jnbd.sock",
        "  jnbd bench 'nbds://127.0.0.1:10809/default?tls-certificates=/etc/pki/jnbd'",
        "  # writes through restarts of the server: the max latency is the longest stall",
        "  jnbd bench --rw randwrite --depth 8 --duration 60 --reconnect-delay 30 nbd://127.0.0.1:10809/default"})
public final class BenchCommand implements Callable<Integer> {

    enum Pattern { read, write, randread, randwrite, randrw, rw }

    @Parameters(paramLabel = "URI", description = "nbd[s]://HOST[:PORT]/EXPORT or nbd[s]+unix:///EXPORT?socket=PATH")
    String uri;

    @Option(names = "--rw", defaultValue = "randread", description = "read, write, randread, randwrite, randrw, rw (default ${DEFAULT-VALUE})")
    Pattern pattern;

    @Option(names = "--bs", defaultValue = "4k", paramLabel = "SIZE", description = "request size (default ${DEFAULT-VALUE})")
    String blockSize;

    @Option(names = "--depth", defaultValue = "32", paramLabel = "N", description = "requests in flight (default ${DEFAULT-VALUE})")
    int depth;

    @Option(names = "--duration", defaultValue = "10", paramLabel = "SECONDS", description = "how long to run (default ${DEFAULT-VALUE})")
    int duration;

    @Option(names = "--mix", defaultValue = "70", paramLabel = "PERCENT", description = "reads as a percentage of requests for randrw/rw (default ${DEFAULT-VALUE})")
    int readPercent;

    @Option(names = "--size", paramLabel = "SIZE", description = "use only the first SIZE bytes of the export (default: all of it)")
    String range;

    @Option(names = "--connections", defaultValue = "1", paramLabel = "N", description = "connections (multi-conn) (default ${DEFAULT-VALUE})")
    int connections;

    @picocli.CommandLine.Mixin
    ReconnectOption reconnect = new ReconnectOption();

    @Option(names = "--progress", negatable = true,
        description = "draw a progress bar with the figures so far on stderr (default: only when stderr is a terminal)")
    Boolean progress;

    @picocli.CommandLine.Spec
    picocli.CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        int bs = (int) ExportSpec.parseSize(blockSize);
        ClientOptions opts = ClientOptions.defaults().withConnections(connections)
            .withRequestsInFlight(Math.max(1, (depth + connections - 1) / connections))
            .withReconnect(reconnect.delay(spec.commandLine()));
        try (NbdClient client = NbdClient.connect(URI.create(uri), opts)) {
            long size = range != null ? Math.min(ExportSpec.parseSize(range), client.size()) : client.size();
            long blocks = size / bs;
            if (blocks < 1) {
                System.err.println("jnbd bench: the export (" + size + " bytes) is smaller than one request of " + bs);
                return 2;
            }
            Histogram latency = new Histogram(60_000_000_000L, 3);
            AtomicLong bytes = new AtomicLong(), reads = new AtomicLong(), writes = new AtomicLong();
            AtomicLong sequential = new AtomicLong();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            long start = System.nanoTime();
            long deadline = start + duration * 1_000_000_000L;
            CountDownLatch done = new CountDownLatch(depth);
            try (Progress bar = Progress.ofSeconds("bench", duration, progress)) {
                for (int slot = 0; slot < depth; slot++) {
                    ByteBuffer buf = ByteBuffer.allocateDirect(bs);
                    for (int i = 0; i < bs; i++) buf.put(i, (byte) (i * 7 + slot));
                    new Slot(client, buf, bs, blocks, new SplittableRandom(slot * 7919L + 1), deadline, latency, bytes,
                        reads, writes, sequential, failure, done).next();
                }
                boolean finished;
                do {
                    finished = done.await(250, TimeUnit.MILLISECONDS);
                    long elapsed = Math.max(1, System.nanoTime() - start);
                    bar.stepTo(Math.min(elapsed / 1_000_000, duration * 1000L));
                    bar.say(String.format(Locale.ROOT, " %.1f MB/s, %.0f IOPS", bytes.get() * 1e3 / elapsed,
                        (reads.get() + writes.get()) * 1e9 / elapsed));
                } while (!finished);
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            if (failure.get() != null) {
                System.err.println("jnbd bench: request failed: " + failure.get().getMessage());
                return 1;
            }
            long n = reads.get() + writes.get();
            System.out.printf("%s bs=%d depth=%d connections=%d: %.1f s%n", pattern, bs, depth, client.connectionCount(), seconds);
            System.out.printf("  throughput %.1f MB/s, %.0f IOPS (%d reads, %d writes)%n", bytes.get() / seconds / 1e6, n / seconds, reads.get(), writes.get());
            System.out.printf("  latency us: p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f%n",
                latency.getValueAtPercentile(50) / 1e3, latency.getValueAtPercentile(90) / 1e3,
                latency.getValueAtPercentile(99) / 1e3, latency.getValueAtPercentile(99.9) / 1e3, latency.getMaxValue() / 1e3);
            return 0;
        }
    }

    /** One request slot: issues a request, and on its completion the next, until the deadline. */
    private final class Slot {
        private final NbdClient client;
        private final ByteBuffer buf;
        private final int bs;
        private final long blocks;
        private final SplittableRandom random;
        private final long deadline;
        private final Histogram latency;
        private final AtomicLong bytes, reads, writes, sequential;
        private final AtomicReference<Throwable> failure;
        private final CountDownLatch done;

        Slot(NbdClient client, ByteBuffer buf, int bs, long blocks, SplittableRandom random, long deadline, Histogram latency,
             AtomicLong bytes, AtomicLong reads, AtomicLong writes, AtomicLong sequential,
             AtomicReference<Throwable> failure, CountDownLatch done) {
            this.client = client; this.buf = buf; this.bs = bs; this.blocks = blocks; this.random = random;
            this.deadline = deadline; this.latency = latency; this.bytes = bytes; this.reads = reads;
            this.writes = writes; this.sequential = sequential; this.failure = failure; this.done = done;
        }

        void next() {
            long now = System.nanoTime();
            if (now >= deadline || failure.get() != null) {
                done.countDown();
                return;
            }
            boolean random = pattern == Pattern.randread || pattern == Pattern.randwrite || pattern == Pattern.randrw;
            long block = random ? this.random.nextLong(blocks) : Math.floorMod(sequential.getAndIncrement(), blocks);
            boolean read = switch (pattern) {
                case read, randread -> true;
                case write, randwrite -> false;
                case randrw, rw -> this.random.nextInt(100) < readPercent;
            };
            ByteBuffer b = buf.clear();
            CompletableFuture<Void> f = read ? client.read(block * bs, b) : client.write(block * bs, b, false);
            f.whenComplete((v, t) -> {
                if (t != null) {
                    failure.compareAndSet(null, t);
                } else {
                    synchronized (latency) {
                        latency.recordValue(Math.min(System.nanoTime() - now, latency.getHighestTrackableValue()));
                    }
                    bytes.addAndGet(bs);
                    (read ? reads : writes).incrementAndGet();
                }
                next();
            });
        }
    }
}
