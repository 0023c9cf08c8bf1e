package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.MemoryBackend;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A registry that makes exports on demand, refuses some with a reason, and hears when connections come and go. */
@Timeout(60)
class ExportRegistryTest {

    /** Makes a memory export for every name that starts with "space/", and refuses "space/taken". */
    static final class OnDemand implements ExportRegistry {
        final ConcurrentHashMap<String, Export> made = new ConcurrentHashMap<>();
        final List<String> events = new CopyOnWriteArrayList<>();

        @Override
        public Export find(String name) throws Refused {
            if (name.equals("space/taken")) throw new Refused("space/taken belongs to another client");
            if (!name.startsWith("space/")) return null;
            return made.computeIfAbsent(name, n -> new Export(n, "", new MemoryBackend(1 << 20)));
        }

        @Override public Collection<Export> listed() { return List.of(); }
        @Override public Collection<Export> all() { return made.values(); }
        @Override public void attached(Export e, String peer) { events.add("+" + e.name()); }
        @Override public void detached(Export e, String peer) { events.add("-" + e.name()); }
    }

    @Test
    void exportsAreMadeOnDemandRefusedWithAReasonAndConnectionsAreReported() throws Exception {
        OnDemand registry = new OnDemand();
        NbdServer server = new NbdServer(registry, ServerConfig.defaults());
        try {
            var address = server.listen(new InetSocketAddress("127.0.0.1", 0));
            try (RawClient c = RawClient.connect(address)) {
                c.greeting();
                c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
                var refused = c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("space/taken", List.of()));
                assertThat(refused.getLast().type()).isEqualTo(Nbd.REP_ERR_POLICY);
                assertThat(refused.getLast().string()).isEqualTo("space/taken belongs to another client");
                var unknown = c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("elsewhere", List.of()));
                assertThat(unknown.getLast().type()).isEqualTo(Nbd.REP_ERR_UNKNOWN);
            }
            try (RawClient a = RawClient.open(address, "space/a"); RawClient b = RawClient.open(address, "space/a")) {
                assertThat(a.write(0, new byte[4096], 0)).isZero();
                a.disconnect();
                b.disconnect();
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (registry.events.size() < 4 && System.nanoTime() < deadline) Thread.sleep(5);
            assertThat(registry.events).containsExactlyInAnyOrder("+space/a", "+space/a", "-space/a", "-space/a");
            assertThat(registry.events.getFirst()).isEqualTo("+space/a");
        } finally {
            server.stop(Duration.ofSeconds(5));
        }
    }
}
