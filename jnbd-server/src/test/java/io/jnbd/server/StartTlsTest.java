package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.FileBackend;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * STARTTLS as doc/proto.md's TLS section has it, over {@link NullTls} (TLS's framing without its cryptography):
 * the three modes, the option state a successful STARTTLS discards, a second STARTTLS, a broken handshake, a
 * client that stops inside a record, and the transmission phase over the TLS transport.
 */
@Timeout(60)
class StartTlsTest {
    @TempDir
    Path dir;
    private NbdServer server;
    private SocketAddress address;

    private void start(ServerTls.Mode mode, ServerConfig config) throws IOException {
        List<Export> exports = new ArrayList<>();
        exports.add(new Export("mem", "memory", new MemoryBackend(64L << 20)));
        exports.add(new Export("file", "cached file", new FileBackend(dir.resolve("disk.img"), FileBackend.Mode.CACHED, false, 64L << 20)));
        server = new NbdServer(new Exports(exports, "mem"), config, mode == ServerTls.Mode.OFF ? ServerTls.OFF : new ServerTls(mode, new NullTls()));
        address = server.listen(new InetSocketAddress("127.0.0.1", 0));
    }

    private void start(ServerTls.Mode mode) throws IOException {
        start(mode, ServerConfig.defaults());
    }

    @AfterEach
    void stop() {
        if (server != null) server.stop(Duration.ofSeconds(5));
    }

    private RawClient greeted() throws IOException {
        RawClient c = RawClient.connect(address);
        c.greeting();
        c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        return c;
    }

    /** STARTTLS, acknowledged, then the null handshake as {@code identity}: from here on every byte is in records. */
    static void startTls(RawClient c, String identity) throws IOException {
        assertThat(c.option(Nbd.OPT_STARTTLS, new byte[0]).type()).as("STARTTLS").isEqualTo(Nbd.REP_ACK);
        NullTls.Streams s = NullTls.connect(c.input(), Channels.newOutputStream(c.channel), identity);
        c.upgrade(s.in(), s.out());
    }

    @Test
    void offRefusesStartTlsWithPolicyAndGoesOn() throws Exception {
        start(ServerTls.Mode.OFF);
        try (RawClient c = greeted()) {
            assertThat(c.option(Nbd.OPT_STARTTLS, new byte[0]).type()).isEqualTo(Nbd.REP_ERR_POLICY);
            assertThat(c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("mem", List.of())).getLast().type())
                .isEqualTo(Nbd.REP_ACK);
        }
    }

    @Test
    void requireAnswersEveryOptionBeforeStartTlsWithTlsReqdAndListsNothing() throws Exception {
        start(ServerTls.Mode.REQUIRE);
        try (RawClient c = greeted()) {
            List<RawClient.OptionReply> list = c.optionUntilFinal(Nbd.OPT_LIST, new byte[0]);
            assertThat(list).as("not one NBD_REP_SERVER before TLS").hasSize(1);
            assertThat(list.getFirst().type()).isEqualTo(Nbd.REP_ERR_TLS_REQD);
            for (int option : new int[] {Nbd.OPT_INFO, Nbd.OPT_GO}) {
                for (String name : new String[] {"mem", "no-such-export", ""}) {
                    var r = c.optionUntilFinal(option, RawClient.exportRequest(name, List.of(Nbd.INFO_NAME, Nbd.INFO_DESCRIPTION)));
                    assertThat(r).as("%s on '%s'", Nbd.optionName(option), name).hasSize(1);
                    assertThat(r.getFirst().type()).isEqualTo(Nbd.REP_ERR_TLS_REQD);
                }
            }
            assertThat(c.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type()).isEqualTo(Nbd.REP_ERR_TLS_REQD);
            for (int option : new int[] {Nbd.OPT_LIST_META_CONTEXT, Nbd.OPT_SET_META_CONTEXT}) {
                var r = c.optionUntilFinal(option, RawClient.metaContext("mem", List.of(Nbd.CONTEXT_BASE_ALLOCATION)));
                assertThat(r).hasSize(1);
                assertThat(r.getFirst().type()).isEqualTo(Nbd.REP_ERR_TLS_REQD);
            }
            assertThat(c.option(4242, new byte[0]).type()).as("even an unknown option").isEqualTo(Nbd.REP_ERR_TLS_REQD);
            assertThat(c.option(Nbd.OPT_ABORT, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
        }
    }

    @Test
    void requireClosesExportNameBeforeStartTls() throws Exception {
        start(ServerTls.Mode.REQUIRE);
        try (RawClient c = greeted()) {
            c.sendOption(Nbd.OPT_EXPORT_NAME, "mem".getBytes());
            assertThat(c.closedByPeer()).as("EXPORT_NAME cannot carry TLS_REQD: closed").isTrue();
        }
    }

    @Test
    void requireServesEverythingOnceTlsIsUp() throws Exception {
        start(ServerTls.Mode.REQUIRE);
        try (RawClient c = greeted()) {
            startTls(c, "alice");
            List<RawClient.OptionReply> list = c.optionUntilFinal(Nbd.OPT_LIST, new byte[0]);
            assertThat(list).extracting(RawClient.OptionReply::type)
                .containsExactly(Nbd.REP_SERVER, Nbd.REP_SERVER, Nbd.REP_ACK);
            c.negotiateAfterGreeting("mem", true);
            byte[] data = ServerFixture.pattern(1, 64 << 10);
            assertThat(c.write(4096, data, 0)).isZero();
            assertThat(c.read(4096, data.length)).isEqualTo(data);
            c.disconnect();
        }
    }

    @Test
    void startTlsWithDataIsInvalidAndTheSessionStaysPlain() throws Exception {
        start(ServerTls.Mode.ON);
        try (RawClient c = greeted()) {
            assertThat(c.option(Nbd.OPT_STARTTLS, new byte[] {1, 2, 3}).type()).isEqualTo(Nbd.REP_ERR_INVALID);
            assertThat(c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("mem", List.of())).getLast().type())
                .isEqualTo(Nbd.REP_ACK);
        }
    }

    @Test
    void aSecondStartTlsIsInvalidOverTls() throws Exception {
        start(ServerTls.Mode.REQUIRE);
        try (RawClient c = greeted()) {
            startTls(c, "alice");
            RawClient.OptionReply again = c.option(Nbd.OPT_STARTTLS, new byte[0]);
            assertThat(again.type()).isEqualTo(Nbd.REP_ERR_INVALID);
            assertThat(again.string()).contains("already");
            assertThat(c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("mem", List.of())).getLast().type())
                .as("the session goes on").isEqualTo(Nbd.REP_ACK);
        }
    }

    @Test
    void onServesPlainClientsAsBefore() throws Exception {
        start(ServerTls.Mode.ON);
        try (RawClient c = RawClient.open(address, "file", true, true)) {
            byte[] data = ServerFixture.pattern(2, 8192);
            assertThat(c.write(0, data, 0)).isZero();
            assertThat(c.read(0, data.length)).isEqualTo(data);
            c.disconnect();
        }
    }

    @Test
    void startTlsForgetsStructuredRepliesAndMetaContexts() throws Exception {
        start(ServerTls.Mode.ON);
        try (RawClient c = greeted()) {
            assertThat(c.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            var set = c.optionUntilFinal(Nbd.OPT_SET_META_CONTEXT, RawClient.metaContext("mem", List.of(Nbd.CONTEXT_BASE_ALLOCATION)));
            assertThat(set.getLast().type()).isEqualTo(Nbd.REP_ACK);
            startTls(c, "");
            var list = c.optionUntilFinal(Nbd.OPT_LIST_META_CONTEXT, RawClient.metaContext("mem", List.of()));
            assertThat(list.getLast().type()).as("structured replies must be negotiated again").isEqualTo(Nbd.REP_ERR_INVALID);
            var go = c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("mem", List.of()));
            assertThat(go.getLast().type()).isEqualTo(Nbd.REP_ACK);
            // Simple replies: the request before STARTTLS no longer counts.
            long cookie = c.cookie();
            c.send(new Request(0, Nbd.CMD_READ, cookie, 0, 512));
            RawClient.Simple reply = c.readSimple(512);
            assertThat(reply.error()).isZero();
            assertThat(reply.cookie()).isEqualTo(cookie);
            // And no block status: base:allocation was selected before STARTTLS.
            assertThat(c.command(Nbd.CMD_BLOCK_STATUS, 0, 0, 4096)).isEqualTo(Nbd.EINVAL);
        }
    }

    @Test
    void garbageInsteadOfAClientHelloClosesThatConnectionOnly() throws Exception {
        start(ServerTls.Mode.REQUIRE);
        try (RawClient bystander = greeted(); RawClient c = greeted()) {
            startTls(bystander, "alice");
            assertThat(c.option(Nbd.OPT_STARTTLS, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            c.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes());
            assertThat(c.drainUntilClosed()).as("closed after the failed handshake").isTrue();
            bystander.negotiateAfterGreeting("mem", false);
            assertThat(bystander.write(0, new byte[512], 0)).isZero();
        }
    }

    @Test
    void aClientThatStopsInsideARecordIsDroppedByTheReceiveTimeout() throws Exception {
        start(ServerTls.Mode.REQUIRE, ServerConfig.defaults().withReceiveTimeout(Duration.ofMillis(500)));
        try (RawClient bystander = greeted(); RawClient c = greeted()) {
            startTls(c, "alice");
            c.negotiateAfterGreeting("mem", false);
            // Half a record, then nothing: the server cannot see a request in it, only that the record is unfinished.
            ByteBuffer header = NullTls.record(NullTls.APPLICATION_DATA, new byte[28], 0, 28);
            header.limit(5 + 10);
            c.channel.write(header);
            assertThat(c.drainUntilClosed()).as("dropped once the receive timeout passed").isTrue();
            startTls(bystander, "bob");
            bystander.negotiateAfterGreeting("mem", false);
            assertThat(bystander.write(0, new byte[512], 0)).as("the other client is served").isZero();
        }
    }

    @Test
    void theHandshakeTimeoutCoversAClientStalledInsideTheTlsHandshake() throws Exception {
        start(ServerTls.Mode.REQUIRE, ServerConfig.defaults().withHandshakeTimeout(Duration.ofSeconds(1)));
        try (RawClient c = greeted()) {
            assertThat(c.option(Nbd.OPT_STARTTLS, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            c.write(NullTls.record(NullTls.HANDSHAKE, new byte[40], 0, 40).limit(12)); // part of a hello, then nothing
            assertThat(c.drainUntilClosed()).as("closed by the handshake timeout").isTrue();
        }
    }

    @Test
    void aClientIdleBetweenRequestsUnderTlsStays() throws Exception {
        start(ServerTls.Mode.REQUIRE, ServerConfig.defaults().withReceiveTimeout(Duration.ofMillis(300)));
        try (RawClient c = greeted()) {
            startTls(c, "alice");
            c.negotiateAfterGreeting("mem", false);
            Thread.sleep(1500); // five receive timeouts at a record boundary
            assertThat(c.write(0, new byte[4096], 0)).isZero();
            c.disconnect();
        }
    }

    /**
     * The transmission phase over the TLS transport, on the routes that differ from plain TCP: a cached file
     * export (no sendfile: reads go through pool buffers), large split reads of memory, a large write payload,
     * and many requests sent in one go, answered in batches through the writer.
     */
    @Test
    void transmissionOverTlsOnEveryRoute() throws Exception {
        start(ServerTls.Mode.REQUIRE);
        for (String export : new String[] {"file", "mem"}) {
            try (RawClient c = greeted()) {
                startTls(c, "alice");
                c.negotiateAfterGreeting(export, true);
                byte[] big = ServerFixture.pattern(3, 4 << 20);
                assertThat(c.write(1 << 20, big, 0)).isZero();
                assertThat(c.read(1 << 20, big.length)).as("%s: 4 MiB back", export).isEqualTo(big);
                byte[] small = ServerFixture.pattern(4, 4096);
                for (int i = 0; i < 32; i++) assertThat(c.write((long) i << 20, small, 0)).isZero();
                // 32 reads sent before any reply is read
                ByteBuffer requests = ByteBuffer.allocate(32 * Nbd.REQUEST_SIZE);
                long[] cookies = new long[32];
                for (int i = 0; i < 32; i++) {
                    cookies[i] = c.cookie();
                    new Request(0, Nbd.CMD_READ, cookies[i], (long) i << 20, 4096).encode(requests);
                }
                c.write(requests.flip());
                List<Long> answered = new ArrayList<>();
                for (int i = 0; i < 32; i++) {
                    List<RawClient.Chunk> chunks = c.readStructured();
                    long cookie = chunks.getFirst().cookie();
                    int at = Arrays.binarySearch(cookies, cookie);
                    assertThat(RawClient.assemble(chunks, cookie, (long) at << 20, 4096)).isEqualTo(small);
                    answered.add(cookie);
                }
                assertThat(answered).containsExactlyInAnyOrder(Arrays.stream(cookies).boxed().toArray(Long[]::new));
                c.disconnect();
            }
        }
    }
}
