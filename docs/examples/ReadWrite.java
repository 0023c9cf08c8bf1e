// Reads and writes a remote disk with the jnbd client library.
// Run with Java 25+ (after `mvn -q -B install -DskipTests`, with a server such as `bin/jnbd serve` running):
//   java -cp "jnbd-client/target/classes:jnbd-protocol/target/classes" docs/examples/ReadWrite.java nbd://127.0.0.1:10809/default
import io.jnbd.client.ClientOptions;
import io.jnbd.client.Extent;
import io.jnbd.client.NbdClient;

import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

public class ReadWrite {
    public static void main(String[] args) throws Exception {
        var options = ClientOptions.defaults()
            .withConnections(4)                        // used only if the server offers multi-conn
            .withRequestTimeout(Duration.ofSeconds(30));
        try (NbdClient disk = NbdClient.connect(URI.create(args[0]), options)) {
            System.out.println("size " + disk.size() + ", flags " + disk.info().flagNames());

            // Blocking view: write a sector, make it durable, read it back.
            ByteBuffer hello = ByteBuffer.allocateDirect(512);
            hello.put("hello, block device".getBytes(StandardCharsets.UTF_8)).clear();
            disk.blocking().write(0, hello, false);
            disk.blocking().flush();
            ByteBuffer back = ByteBuffer.allocateDirect(512);
            disk.blocking().read(0, back);
            System.out.println(StandardCharsets.UTF_8.decode(back.flip().limit(19)));

            // Asynchronous: 16 reads of 1 MiB in flight at once, completing in any order.
            List<CompletableFuture<Void>> reads = new ArrayList<>();
            for (int i = 0; i < 16 && (i + 1L) << 20 <= disk.size(); i++) {
                reads.add(disk.read((long) i << 20, ByteBuffer.allocateDirect(1 << 20)));
            }
            CompletableFuture.allOf(reads.toArray(CompletableFuture[]::new)).join();

            // Block status: which parts hold data.
            List<Extent> extents = disk.extents(0, disk.size()).join();
            long data = extents.stream().filter(e -> !e.zero()).mapToLong(Extent::length).sum();
            System.out.println(extents.size() + " extents, " + data + " bytes of data");
        }
    }
}
