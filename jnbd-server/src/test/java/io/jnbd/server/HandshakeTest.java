package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.Info;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.OptionHeader;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.MemoryBackend;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Fixed newstyle negotiation: every option, the errors the spec names, and clean closes for broken clients. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(60)
class HandshakeTest {
    @TempDir
    static Path dir;
    ServerFixture fx;

    @BeforeAll
    void start() throws IOException {
        fx = new ServerFixture(List.of(
            new Export("first", "the first export", new MemoryBackend(1 << 20)),
            new Export("second", "", new MemoryBackend(2 << 20)),
            ExportSpec.parse("direct", "file:" + dir.resolve("d.img") + ",size=4M,mode=direct").openExport(),
            new Export("ünïcødé", "", new MemoryBackend(4096))));
    }

    @AfterAll
    void stop() {
        if (fx != null) fx.close();
    }

    private RawClient negotiating() throws IOException {
        RawClient c = RawClient.connect(fx.address);
        int flags = c.greeting();
        assertThat(flags & Nbd.FLAG_FIXED_NEWSTYLE).isNotZero();
        assertThat(flags & Nbd.FLAG_NO_ZEROES).isNotZero();
        c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        return c;
    }

    /** The session is still usable: LIST answers. */
    private static void assertStillNegotiating(RawClient c) throws IOException {
        List<RawClient.OptionReply> list = c.optionUntilFinal(Nbd.OPT_LIST, new byte[0]);
        assertThat(list.getLast().type()).isEqualTo(Nbd.REP_ACK);
    }

    /** The server is still serving others: a fresh client reaches transmission and reads. */
    private void assertServerServes() throws IOException {
        try (RawClient c = fx.open("first")) {
            assertThat(c.read(0, 4096)).hasSize(4096);
        }
    }

    @Test
    void listNamesEveryExport() throws IOException {
        try (RawClient c = negotiating()) {
            List<RawClient.OptionReply> replies = c.optionUntilFinal(Nbd.OPT_LIST, new byte[0]);
            assertThat(replies.getLast().type()).isEqualTo(Nbd.REP_ACK);
            List<String> names = new ArrayList<>();
            for (RawClient.OptionReply r : replies.subList(0, replies.size() - 1)) {
                assertThat(r.type()).isEqualTo(Nbd.REP_SERVER);
                ByteBuffer d = r.data().duplicate();
                int len = d.getInt();
                assertThat(len).isLessThanOrEqualTo(d.remaining());
                byte[] name = new byte[len];
                d.get(name);
                names.add(new String(name, java.nio.charset.StandardCharsets.UTF_8));
            }
            assertThat(names).containsExactlyInAnyOrder("first", "second", "direct", "ünïcødé");
            // LIST with data is invalid, and the session continues.
            assertThat(c.option(Nbd.OPT_LIST, new byte[] {1}).type()).isEqualTo(Nbd.REP_ERR_INVALID);
            assertStillNegotiating(c);
        }
    }

    @Test
    void infoRepliesExportNameDescriptionAndBlockSizeThenGoStillWorks() throws IOException {
        try (RawClient c = negotiating()) {
            List<RawClient.OptionReply> replies = c.optionUntilFinal(Nbd.OPT_INFO,
                RawClient.exportRequest("first", List.of(Nbd.INFO_NAME, Nbd.INFO_DESCRIPTION, Nbd.INFO_BLOCK_SIZE)));
            assertThat(replies.getLast().type()).isEqualTo(Nbd.REP_ACK);
            List<Info> infos = replies.stream().filter(r -> r.type() == Nbd.REP_INFO).map(RawClient.OptionReply::info).toList();
            assertThat(infos).contains(new Info.Name("first"), new Info.Description("the first export"));
            Info.Export e = infos.stream().filter(i -> i instanceof Info.Export).map(i -> (Info.Export) i).findFirst().orElseThrow();
            assertThat(e.size()).isEqualTo(1 << 20);
            assertThat(e.transmissionFlags() & Nbd.FLAG_HAS_FLAGS).isNotZero();
            assertThat(e.transmissionFlags() & Nbd.FLAG_READ_ONLY).isZero();
            assertThat(e.transmissionFlags() & Nbd.FLAG_CAN_MULTI_CONN).isNotZero();
            assertThat(infos).contains(new Info.BlockSize(1, 4096, 32 << 20));

            // After INFO the session continues: GO on another export.
            List<RawClient.OptionReply> go = c.optionUntilFinal(Nbd.OPT_GO,
                RawClient.exportRequest("direct", List.of(Nbd.INFO_BLOCK_SIZE)));
            assertThat(go.getLast().type()).isEqualTo(Nbd.REP_ACK);
            c.takeInfos(go);
            assertThat(c.size).isEqualTo(4 << 20);
            assertThat(c.blockSize().minimum()).isEqualTo(512);
            assertThat(c.blockSize().preferred()).isGreaterThanOrEqualTo(4096);
            // Transmission works after GO.
            assertThat(c.read(0, 4096)).hasSize(4096);
        }
    }

    @Test
    void emptyNameSelectsTheDefaultExport() throws IOException {
        try (RawClient c = negotiating()) {
            List<RawClient.OptionReply> go = c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("", List.of(Nbd.INFO_NAME)));
            assertThat(go.getLast().type()).isEqualTo(Nbd.REP_ACK);
            c.takeInfos(go);
            assertThat(c.size).isEqualTo(1 << 20);
        }
    }

    @Test
    void unicodeExportNamesWork() throws IOException {
        try (RawClient c = fx.open("ünïcødé")) {
            assertThat(c.size).isEqualTo(4096);
        }
    }

    @Test
    void unknownExportIsErrUnknownForInfoAndGoAndTheSessionContinues() throws IOException {
        try (RawClient c = negotiating()) {
            for (int opt : new int[] {Nbd.OPT_INFO, Nbd.OPT_GO}) {
                List<RawClient.OptionReply> r = c.optionUntilFinal(opt, RawClient.exportRequest("nope", List.of()));
                assertThat(r).hasSize(1);
                assertThat(r.getFirst().type()).isEqualTo(Nbd.REP_ERR_UNKNOWN);
            }
            assertStillNegotiating(c);
        }
    }

    @Test
    void unknownExportWithExportNameClosesTheConnection() throws IOException {
        try (RawClient c = negotiating()) {
            c.sendOption(Nbd.OPT_EXPORT_NAME, "nope".getBytes());
            assertThat(c.closedByPeer()).isTrue();
        }
        assertServerServes();
    }

    @Test
    void unknownOptionIsErrUnsupAndTheSessionContinues() throws IOException {
        try (RawClient c = negotiating()) {
            for (int opt : new int[] {0, Nbd.OPT_PEEK_EXPORT, Nbd.OPT_EXTENDED_HEADERS, 12, 0x7fffffff, -1}) {
                RawClient.OptionReply r = c.option(opt, new byte[] {1, 2, 3});
                assertThat(r.type()).as("option %d", opt).isEqualTo(Nbd.REP_ERR_UNSUP);
            }
            assertStillNegotiating(c);
        }
    }

    @Test
    void starttlsIsRefusedByPolicy() throws IOException {
        try (RawClient c = negotiating()) {
            assertThat(c.option(Nbd.OPT_STARTTLS, new byte[0]).type()).isIn(Nbd.REP_ERR_POLICY, Nbd.REP_ERR_UNSUP);
            assertStillNegotiating(c);
        }
    }

    @Test
    void malformedInfoAndGoDataIsErrInvalidAndTheSessionContinues() throws IOException {
        try (RawClient c = negotiating()) {
            byte[][] bad = {
                new byte[0],                                                               // shorter than 6
                ByteBuffer.allocate(6).putInt(100).putShort((short) 0).array(),            // name overruns
                ByteBuffer.allocate(7).putInt(0).putShort((short) 1).put((byte) 0).array(), // count 1, odd byte
                ByteBuffer.allocate(10).putInt(0).putShort((short) 0).putInt(0).array(),   // trailing bytes
                ByteBuffer.allocate(7).putInt(1).put((byte) 0xff).putShort((short) 0).array(), // invalid UTF-8
                ByteBuffer.allocate(6).putInt(-1).putShort((short) 0).array(),             // 4 GiB name
            };
            for (int opt : new int[] {Nbd.OPT_INFO, Nbd.OPT_GO}) {
                for (byte[] b : bad) {
                    List<RawClient.OptionReply> r = c.optionUntilFinal(opt, b);
                    assertThat(r).hasSize(1);
                    assertThat(r.getFirst().type()).isEqualTo(Nbd.REP_ERR_INVALID);
                }
            }
            assertStillNegotiating(c);
            // ... and GO still works afterwards.
            List<RawClient.OptionReply> go = c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("second", List.of()));
            assertThat(go.getLast().type()).isEqualTo(Nbd.REP_ACK);
        }
    }

    @Test
    void structuredReplyTwiceOrWithDataIsInvalid() throws IOException {
        try (RawClient c = negotiating()) {
            assertThat(c.option(Nbd.OPT_STRUCTURED_REPLY, new byte[] {0}).type()).isEqualTo(Nbd.REP_ERR_INVALID);
            assertThat(c.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            assertThat(c.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type()).isEqualTo(Nbd.REP_ERR_INVALID);
            assertStillNegotiating(c);
        }
    }

    @Test
    void metaContextBeforeStructuredRepliesIsInvalid() throws IOException {
        try (RawClient c = negotiating()) {
            byte[] q = RawClient.metaContext("first", List.of(Nbd.CONTEXT_BASE_ALLOCATION));
            assertThat(c.optionUntilFinal(Nbd.OPT_SET_META_CONTEXT, q)).extracting(RawClient.OptionReply::type)
                .containsExactly(Nbd.REP_ERR_INVALID);
            assertThat(c.optionUntilFinal(Nbd.OPT_LIST_META_CONTEXT, q)).extracting(RawClient.OptionReply::type)
                .containsExactly(Nbd.REP_ERR_INVALID);
            assertStillNegotiating(c);
        }
    }

    @Test
    void listAndSetMetaContextForBaseAllocation() throws IOException {
        try (RawClient c = negotiating()) {
            assertThat(c.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            // LIST with no queries lists every context.
            List<RawClient.OptionReply> all = c.optionUntilFinal(Nbd.OPT_LIST_META_CONTEXT, RawClient.metaContext("first", List.of()));
            assertThat(all).extracting(RawClient.OptionReply::type).containsExactly(Nbd.REP_META_CONTEXT, Nbd.REP_ACK);
            assertThat(contextName(all.getFirst())).isEqualTo(Nbd.CONTEXT_BASE_ALLOCATION);
            // LIST "base:" lists the namespace.
            List<RawClient.OptionReply> ns = c.optionUntilFinal(Nbd.OPT_LIST_META_CONTEXT, RawClient.metaContext("first", List.of("base:")));
            assertThat(ns).extracting(RawClient.OptionReply::type).containsExactly(Nbd.REP_META_CONTEXT, Nbd.REP_ACK);
            // Unknown contexts are simply not returned.
            List<RawClient.OptionReply> none = c.optionUntilFinal(Nbd.OPT_SET_META_CONTEXT,
                RawClient.metaContext("first", List.of("qemu:dirty-bitmap:x")));
            assertThat(none).extracting(RawClient.OptionReply::type).containsExactly(Nbd.REP_ACK);
            // Unknown export.
            assertThat(c.optionUntilFinal(Nbd.OPT_SET_META_CONTEXT, RawClient.metaContext("nope", List.of(Nbd.CONTEXT_BASE_ALLOCATION))))
                .extracting(RawClient.OptionReply::type).containsExactly(Nbd.REP_ERR_UNKNOWN);
            // Malformed data.
            assertThat(c.optionUntilFinal(Nbd.OPT_SET_META_CONTEXT, new byte[] {0, 0, 0}))
                .extracting(RawClient.OptionReply::type).containsExactly(Nbd.REP_ERR_INVALID);
            // SET base:allocation gives a non-zero id that block status replies then carry.
            List<RawClient.OptionReply> set = c.optionUntilFinal(Nbd.OPT_SET_META_CONTEXT,
                RawClient.metaContext("first", List.of(Nbd.CONTEXT_BASE_ALLOCATION)));
            assertThat(set).extracting(RawClient.OptionReply::type).containsExactly(Nbd.REP_META_CONTEXT, Nbd.REP_ACK);
            int id = set.getFirst().data().getInt(0);
            assertThat(id).isNotZero();
            assertThat(contextName(set.getFirst())).isEqualTo(Nbd.CONTEXT_BASE_ALLOCATION);
            List<RawClient.OptionReply> go = c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("first", List.of()));
            assertThat(go.getLast().type()).isEqualTo(Nbd.REP_ACK);
            c.structured = true;
            c.send(new Request(0, Nbd.CMD_BLOCK_STATUS, 9, 0, 4096));
            RawClient.Reply r = c.readReply();
            assertThat(r.error()).isZero();
            assertThat(r.chunks().getFirst().blockStatus().contextId()).isEqualTo(id);
        }
    }

    @Test
    void metaContextSetForAnotherExportDoesNotApply() throws IOException {
        try (RawClient c = negotiating()) {
            assertThat(c.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
            c.optionUntilFinal(Nbd.OPT_SET_META_CONTEXT, RawClient.metaContext("second", List.of(Nbd.CONTEXT_BASE_ALLOCATION)));
            assertThat(c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest("first", List.of())).getLast().type()).isEqualTo(Nbd.REP_ACK);
            c.structured = true;
            assertThat(c.command(Nbd.CMD_BLOCK_STATUS, 0, 0, 4096)).isEqualTo(Nbd.EINVAL);
        }
    }

    private static String contextName(RawClient.OptionReply r) {
        ByteBuffer d = r.data().duplicate();
        d.getInt();
        byte[] b = new byte[d.remaining()];
        d.get(b);
        return new String(b, java.nio.charset.StandardCharsets.UTF_8);
    }

    @Test
    void hugeOptionLengthClosesTheConnectionWithoutAllocating() throws IOException {
        // 100 MiB fits this JVM's heap: a server that allocated and waited for the data would hang, not close.
        try (RawClient c = negotiating()) {
            ByteBuffer b = ByteBuffer.allocate(Nbd.OPTION_HEADER_SIZE);
            OptionHeader.encode(b, Nbd.OPT_INFO, 100 << 20);
            c.write(b.flip());
            assertThat(c.closedByPeer()).isTrue();
        }
        try (RawClient c = negotiating()) {
            ByteBuffer b = ByteBuffer.allocate(Nbd.OPTION_HEADER_SIZE);
            OptionHeader.encode(b, Nbd.OPT_GO, 1 << 30);
            c.write(b.flip());
            c.write(new byte[1024]); // a little of the promised gigabyte
            assertThat(c.closedByPeer()).isTrue();
        }
        try (RawClient c = negotiating()) {
            ByteBuffer b = ByteBuffer.allocate(Nbd.OPTION_HEADER_SIZE);
            OptionHeader.encode(b, 77, -1); // 4 GiB - 1 of an unknown option
            c.write(b.flip());
            assertThat(c.closedByPeer()).isTrue();
        }
        assertServerServes();
    }

    @Test
    void badOptionMagicClosesTheConnection() throws IOException {
        try (RawClient c = negotiating()) {
            c.write(ByteBuffer.allocate(16).putLong(0x1234567890abcdefL).putInt(Nbd.OPT_LIST).putInt(0).flip());
            assertThat(c.closedByPeer()).isTrue();
        }
        assertServerServes();
    }

    @Test
    void garbageClientFlagsCloseTheConnection() throws IOException {
        for (int flags : new int[] {0xdeadbeef, 1 << 2, 0x80000000}) {
            try (RawClient c = RawClient.connect(fx.address)) {
                c.greeting();
                c.clientFlags(flags);
                assertThat(c.closedByPeer()).as("client flags 0x%x", flags).isTrue();
            }
        }
        assertServerServes();
    }

    @Test
    void truncatedOptionThenEofClosesTheConnection() throws IOException {
        try (RawClient c = negotiating()) {
            ByteBuffer b = ByteBuffer.allocate(Nbd.OPTION_HEADER_SIZE);
            OptionHeader.encode(b, Nbd.OPT_GO, 100);
            c.write(b.flip());
            c.write(new byte[10]);
            c.channel.shutdownOutput();
            assertThat(c.closedByPeer()).isTrue();
        }
        try (RawClient c = negotiating()) {
            c.write(new byte[] {0x49, 0x48, 0x41}); // half an option header
            c.channel.shutdownOutput();
            assertThat(c.closedByPeer()).isTrue();
        }
        try (RawClient c = RawClient.connect(fx.address)) {
            c.greeting();
            c.write(new byte[] {0, 0}); // half the client flags
            c.channel.shutdownOutput();
            assertThat(c.closedByPeer()).isTrue();
        }
        assertServerServes();
    }

    @Test
    void abortIsAcknowledgedAndClosed() throws IOException {
        try (RawClient c = negotiating()) {
            RawClient.OptionReply r = c.option(Nbd.OPT_ABORT, new byte[0]);
            assertThat(r.type()).isEqualTo(Nbd.REP_ACK);
            assertThat(c.closedByPeer()).isTrue();
        }
    }

    @Test
    void exportNameWithNoZeroesRepliesTenBytes() throws IOException {
        try (RawClient c = RawClient.connect(fx.address)) {
            c.greeting();
            c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
            c.sendOption(Nbd.OPT_EXPORT_NAME, "second".getBytes());
            ByteBuffer b = c.readBytes(10);
            assertThat(b.getLong()).isEqualTo(2 << 20);
            int flags = Short.toUnsignedInt(b.getShort());
            assertThat(flags & Nbd.FLAG_HAS_FLAGS).isNotZero();
            // The next bytes are the reply to our first request, not padding.
            c.send(new Request(0, Nbd.CMD_FLUSH, 5, 0, 0));
            RawClient.Reply r = c.readReply();
            assertThat(r.cookie()).isEqualTo(5);
            assertThat(r.error()).isZero();
        }
    }

    @Test
    void exportNameWithoutNoZeroesRepliesWith124ZeroBytes() throws IOException {
        try (RawClient c = RawClient.connect(fx.address)) {
            c.greeting();
            c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE);
            c.sendOption(Nbd.OPT_EXPORT_NAME, new byte[0]); // default export
            ByteBuffer b = c.readBytes(134);
            assertThat(b.getLong()).isEqualTo(1 << 20);
            b.getShort();
            while (b.hasRemaining()) assertThat(b.get()).isZero();
            c.send(new Request(0, Nbd.CMD_FLUSH, 6, 0, 0));
            assertThat(c.readReply().cookie()).isEqualTo(6);
        }
    }

    @Test
    void idleHandshakeTimesOut() throws IOException {
        try (ServerFixture quick = new ServerFixture(List.of(new Export("m", "", new MemoryBackend(4096))),
                ServerConfig.defaults().withHandshakeTimeout(Duration.ofMillis(300)))) {
            try (RawClient silent = RawClient.connect(quick.address)) {
                silent.greeting();
                // Say nothing: the server must hang up by itself (the read timeout of 20 s is far longer).
                assertThat(silent.closedByPeer()).isTrue();
            }
            try (RawClient slow = RawClient.connect(quick.address)) {
                slow.greeting();
                slow.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE);
                assertThat(slow.option(Nbd.OPT_LIST, new byte[0]).type()).isEqualTo(Nbd.REP_SERVER);
                slow.readOptionReply();
                assertThat(slow.closedByPeer()).as("options do not extend the handshake deadline").isTrue();
            }
            // A client that reaches transmission is not cut off by the handshake timer.
            try (RawClient ok = RawClient.open(quick.address, "m")) {
                long deadline = System.nanoTime() + Duration.ofMillis(600).toNanos();
                while (System.nanoTime() < deadline) assertThat(ok.read(0, 512)).hasSize(512);
            }
        }
    }

    @Test
    void optionsAfterGoAreTransmissionGarbage() throws IOException {
        try (RawClient c = fx.open("first")) {
            // An option header where a request is expected: bad request magic, connection closed.
            c.sendOption(Nbd.OPT_LIST, new byte[12]); // 16 + 12 bytes: as long as a request header
            assertThat(c.closedByPeer()).isTrue();
        }
        assertServerServes();
    }
}
