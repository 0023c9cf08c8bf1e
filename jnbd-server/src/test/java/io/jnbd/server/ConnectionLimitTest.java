package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.net.Inet4Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.NetworkInterface;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * --max-connections: a client beyond the limit is told why in its handshake instead of finding its connection
 * closed, a slot freed by a leaving client is taken by the next one, and local clients (an operator's nbdinfo)
 * get the few slots kept beyond the limit that remote ones do not.
 */
@Timeout(60)
class ConnectionLimitTest {

    private static ServerFixture server(int max, int operatorSlots) throws IOException {
        return new ServerFixture(List.of(new Export("mem", "", new MemoryBackend(1 << 20))),
            ServerConfig.defaults().withMaxConnections(max).withOperatorSlots(operatorSlots));
    }

    /** Connects and sends GO; returns the final reply to it. */
    private static RawClient.OptionReply tryGo(SocketAddress address, List<RawClient> keep) throws IOException {
        RawClient c = RawClient.connect(address);
        keep.add(c);
        c.greeting();
        c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        return c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("mem", List.of())).getLast();
    }

    /** {@link #tryGo}, again while the server closes the connection without a word (bounded: 10 s). */
    private static RawClient.OptionReply tryGoUntilAnswered(SocketAddress address, List<RawClient> keep) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (true) {
            try {
                return tryGo(address, keep);
            } catch (java.io.EOFException closedAtOnce) {
                if (System.nanoTime() > deadline) throw closedAtOnce;
                Thread.sleep(10);
            }
        }
    }

    private static void awaitCount(NbdServer s, int n) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (s.connectionCount() != n && System.nanoTime() < deadline) Thread.sleep(10);
        assertThat(s.connectionCount()).as("connections").isEqualTo(n);
    }

    private static void closeAll(List<RawClient> clients) {
        for (RawClient c : clients) {
            try {
                c.close();
            } catch (IOException ignored) {
                // closing is best effort
            }
        }
    }

    @Test
    void aClientOverTheLimitIsToldWhyAndTheNextFreeSlotIsServed() throws Exception {
        List<RawClient> clients = new ArrayList<>();
        try (ServerFixture fx = server(3, 0)) {
            for (int i = 0; i < 3; i++) assertThat(tryGo(fx.address, clients).type()).isEqualTo(Nbd.REP_ACK);
            awaitCount(fx.server, 3);

            RawClient.OptionReply refused = tryGo(fx.address, clients);
            assertThat(refused.type()).isEqualTo(Nbd.REP_ERR_POLICY);
            assertThat(refused.string()).contains("limit of 3 connections");
            // It may still look (LIST, structured replies), but every option that opens an export is turned
            // down the same way; ABORT still ends the session politely.
            RawClient over = clients.getLast();
            assertThat(over.optionUntilFinal(Nbd.OPT_LIST, new byte[0]).getLast().type()).isEqualTo(Nbd.REP_ACK);
            assertThat(over.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            RawClient.OptionReply info = over.optionUntilFinal(Nbd.OPT_INFO, RawClient.exportRequest("mem", List.of())).getLast();
            assertThat(info.type()).isEqualTo(Nbd.REP_ERR_POLICY);
            assertThat(over.option(Nbd.OPT_ABORT, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            assertThat(fx.server.connectionCount()).as("a refused client holds no slot").isEqualTo(3);

            clients.getFirst().close();
            awaitCount(fx.server, 2);
            RawClient next = RawClient.open(fx.address, "mem");
            clients.add(next);
            byte[] data = ServerFixture.pattern(7, 4096);
            assertThat(next.write(0, data, 0)).isZero();
            assertThat(next.read(0, 4096)).isEqualTo(data);
        } finally {
            closeAll(clients);
        }
    }

    @Test
    void exportNameOverTheLimitIsClosedBecauseItCannotCarryAnError() throws Exception {
        List<RawClient> clients = new ArrayList<>();
        try (ServerFixture fx = server(1, 0)) {
            assertThat(tryGo(fx.address, clients).type()).isEqualTo(Nbd.REP_ACK);
            RawClient c = RawClient.connect(fx.address);
            clients.add(c);
            c.greeting();
            c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
            c.sendOption(Nbd.OPT_EXPORT_NAME, "mem".getBytes());
            assertThat(c.channel.read(ByteBuffer.allocate(1))).as("closed without a reply").isEqualTo(-1);
        } finally {
            closeAll(clients);
        }
    }

    @Test
    void localClientsGetTheOperatorSlotsBeyondTheLimit() throws Exception {
        List<RawClient> clients = new ArrayList<>();
        try (ServerFixture fx = server(2, 1)) {
            for (int i = 0; i < 2; i++) assertThat(tryGo(fx.address, clients).type()).isEqualTo(Nbd.REP_ACK);
            assertThat(tryGo(fx.address, clients).type()).as("over loopback: an operator").isEqualTo(Nbd.REP_ACK);
            awaitCount(fx.server, 3);
            assertThat(tryGo(fx.address, clients).type()).as("the operator slots are taken too").isEqualTo(Nbd.REP_ERR_POLICY);
        } finally {
            closeAll(clients);
        }
    }

    @Test
    void remoteClientsDoNotGetTheOperatorSlots() throws Exception {
        Optional<InetAddress> own = nonLoopbackAddress();
        Assumptions.assumeTrue(own.isPresent(), "this host has no non-loopback IPv4 address to connect from");
        List<RawClient> clients = new ArrayList<>();
        NbdServer s = new NbdServer(new Exports(List.of(new Export("mem", "", new MemoryBackend(1 << 20))), null),
            ServerConfig.defaults().withMaxConnections(1).withOperatorSlots(4));
        try {
            // Bound to the host's own address, so the client's source address is that one, not loopback.
            SocketAddress address = s.listen(new InetSocketAddress(own.get(), 0));
            assertThat(tryGo(address, clients).type()).isEqualTo(Nbd.REP_ACK);
            assertThat(tryGo(address, clients).type()).isEqualTo(Nbd.REP_ERR_POLICY);
        } finally {
            closeAll(clients);
            s.stop(Duration.ofSeconds(5));
        }
    }

    @Test
    void aFloodOfRefusedClientsIsClosedWithoutHoldingAnything() throws Exception {
        List<SocketChannel> flood = new ArrayList<>();
        List<RawClient> clients = new ArrayList<>();
        try (ServerFixture fx = server(1, 0)) {
            assertThat(tryGo(fx.address, clients).type()).isEqualTo(Nbd.REP_ACK);
            // More than the server bothers to explain itself to: each either hears why or is closed at once.
            for (int i = 0; i < 400; i++) flood.add(SocketChannel.open(fx.address));
            for (SocketChannel ch : flood) ch.close();
            // Until the server has seen the flood's refused clients go, a newcomer may still be closed at once.
            RawClient.OptionReply r = tryGoUntilAnswered(fx.address, clients);
            assertThat(r.type()).isEqualTo(Nbd.REP_ERR_POLICY);
            clients.getFirst().close();
            awaitCount(fx.server, 0);
            RawClient after = RawClient.open(fx.address, "mem");
            clients.add(after);
            assertThat(after.read(0, 512)).hasSize(512);
        } finally {
            for (SocketChannel ch : flood) ch.close();
            closeAll(clients);
        }
    }

    private static Optional<InetAddress> nonLoopbackAddress() throws IOException {
        for (NetworkInterface nif : NetworkInterface.networkInterfaces().toList()) {
            if (!nif.isUp() || nif.isLoopback()) continue;
            for (InetAddress a : nif.inetAddresses().toList()) {
                if (a instanceof Inet4Address && !a.isLoopbackAddress() && !a.isLinkLocalAddress()) return Optional.of(a);
            }
        }
        return Optional.empty();
    }
}
