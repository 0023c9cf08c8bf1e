// Writes a disk while its server restarts: the client reconnects and sends again what got no answer.
// Run with Java 25+ against a file export, and restart the server while it runs (see docs/client.md, "Reconnect"):
//   bin/jnbd serve --listen 127.0.0.1:10809 --export disk=file:/tmp/disk.img,size=64M &
//   java -cp "jnbd-client/target/classes:jnbd-protocol/target/classes:jnbd-tls/target/classes" \
//        docs/examples/Reconnect.java nbd://127.0.0.1:10809/disk
import io.jnbd.client.ClientOptions;
import io.jnbd.client.NbdClient;

import java.net.URI;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

public class Reconnect {
    public static void main(String[] args) throws Exception {
        var options = ClientOptions.defaults().withReconnect(Duration.ofSeconds(30));
        try (NbdClient disk = NbdClient.connect(URI.create(args[0]), options)) {
            int block = 4096;
            long blocks = Math.min(disk.size() / block, 16384);
            Semaphore window = new Semaphore(8);              // QD8
            AtomicLong longest = new AtomicLong();
            AtomicReference<Throwable> failed = new AtomicReference<>();
            for (long round = 1; round <= 20 && failed.get() == null; round++) {
                for (long b = 0; b < blocks && failed.get() == null; b++) {
                    window.acquire();
                    long start = System.nanoTime();
                    disk.write(b * block, stamp(block, b, round), false).whenComplete((v, e) -> {
                        longest.accumulateAndGet(System.nanoTime() - start, Math::max);
                        if (e != null) failed.compareAndSet(null, e);
                        window.release();
                    });
                }
                window.acquire(8);
                window.release(8);
                disk.blocking().flush();
                System.out.printf("round %d written and flushed; longest write so far %d ms%n", round, longest.get() / 1_000_000);
            }
            if (failed.get() != null) {
                System.out.println("failed: " + failed.get().getMessage()); // the server stayed away longer than 30 s
                return;
            }
            ByteBuffer got = ByteBuffer.allocateDirect(block);
            for (long b = 0; b < blocks; b++) {
                disk.read(b * block, got.clear()).join();
                if (!got.flip().equals(stamp(block, b, 20))) throw new AssertionError("block " + b + " does not read back");
            }
            System.out.println("every block reads back");
        }
    }

    /** A block that says which block and round it is. */
    private static ByteBuffer stamp(int size, long block, long round) {
        ByteBuffer b = ByteBuffer.allocateDirect(size);
        while (b.hasRemaining()) b.putLong(block * 1_000_003 + round);
        return b.flip();
    }
}
