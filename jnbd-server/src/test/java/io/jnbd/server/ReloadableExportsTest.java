package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.FilterForTests;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A reload's replacement of the export set: new clients see the new set, a connection keeps the export it
 * opened, and a backend the new set dropped is closed once, after its last client has gone.
 */
@Timeout(60)
class ReloadableExportsTest {

    /** Counts its closes; a second close of a file backend would close a descriptor number reused since. */
    static final class Counted extends FilterForTests {
        final AtomicInteger closes = new AtomicInteger();

        Counted() {
            super(new MemoryBackend(1 << 20));
        }

        @Override
        public void close() throws IOException {
            closes.incrementAndGet();
            super.close();
        }
    }

    @Test
    void aRemovedExportServesItsClientsAndClosesAfterTheLastOne() throws Exception {
        Counted a = new Counted(), b = new Counted(), c = new Counted();
        var registry = new ReloadableExports(new Exports(List.of(export("a", a), export("b", b)), null), Duration.ZERO);
        NbdServer server = new NbdServer(registry, ServerConfig.defaults());
        try {
            SocketAddress address = server.listen(new InetSocketAddress("127.0.0.1", 0));
            byte[] data = new byte[4096];
            Arrays.fill(data, (byte) 0x5b);
            try (RawClient onB = RawClient.open(address, "b")) {
                assertThat(onB.write(0, data, 0)).isZero();

                registry.replace(new Exports(List.of(export("a", a), export("c", c)), "c"));

                assertThat(goReply(address, "b")).as("a new client of b").isEqualTo(Nbd.REP_ERR_UNKNOWN);
                assertThat(goReply(address, "c")).isEqualTo(Nbd.REP_ACK);
                assertThat(goReply(address, "")).as("the new default").isEqualTo(Nbd.REP_ACK);
                assertThat(onB.write(4096, data, 0)).as("b's client goes on").isZero();
                assertThat(onB.read(0, 8192)).containsOnly((byte) 0x5b);
                assertThat(b.closes).as("closed while in use").hasValue(0);
                onB.disconnect();
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (b.closes.get() == 0 && System.nanoTime() < deadline) Thread.sleep(5);
            assertThat(b.closes).as("b closed once its last client left").hasValue(1);
            assertThat(registry.retiredCount()).isZero();
        } finally {
            server.stop(Duration.ofSeconds(5));
        }
        assertThat(List.of(a.closes.get(), b.closes.get(), c.closes.get())).containsExactly(1, 1, 1);
    }

    @Test
    void aRetiredBackendWithinItsGraceIsClosedOnceWhenTheServerStops() throws Exception {
        Counted a = new Counted(), b = new Counted();
        var registry = new ReloadableExports(new Exports(List.of(export("a", a), export("b", b)), null), Duration.ofHours(1));
        NbdServer server = new NbdServer(registry, ServerConfig.defaults());
        registry.replace(new Exports(List.of(export("a", a)), null));
        assertThat(registry.find("b")).isNull();
        assertThat(registry.retiredCount()).as("no one uses b, but a client may have found it in its handshake").isOne();
        assertThat(registry.all()).extracting(Export::name).containsExactly("a", "b");
        server.stop(Duration.ofSeconds(5));
        assertThat(List.of(a.closes.get(), b.closes.get())).containsExactly(1, 1);
    }

    @Test
    void anExportWhoseSettingsChangeKeepsItsBackendAndItsClients() throws Exception {
        Counted a = new Counted();
        var registry = new ReloadableExports(new Exports(List.of(export("a", a)), null), Duration.ZERO);
        NbdServer server = new NbdServer(registry, ServerConfig.defaults());
        try {
            SocketAddress address = server.listen(new InetSocketAddress("127.0.0.1", 0));
            try (RawClient before = RawClient.open(address, "a")) {
                assertThat(before.write(0, new byte[] {7, 7, 7, 7}, 0)).isZero();
                registry.replace(new Exports(List.of(new Export("a", "now described", a)), null));
                try (RawClient after = RawClient.open(address, "a")) {
                    assertThat(after.read(0, 4)).containsOnly((byte) 7);
                }
                assertThat(before.read(0, 4)).containsOnly((byte) 7);
            }
            assertThat(registry.retiredCount()).isZero();
            assertThat(a.closes).hasValue(0);
        } finally {
            server.stop(Duration.ofSeconds(5));
        }
        assertThat(a.closes).hasValue(1);
    }

    private static Export export(String name, Counted backend) {
        return new Export(name, "", backend);
    }

    private static int goReply(SocketAddress address, String export) throws IOException {
        try (RawClient c = RawClient.connect(address)) {
            c.greeting();
            c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
            int type = c.optionUntilFinal(Nbd.OPT_INFO, RawClient.exportRequest(export, List.of())).getLast().type();
            c.optionUntilFinal(Nbd.OPT_ABORT, new byte[0]);
            return type;
        }
    }
}
