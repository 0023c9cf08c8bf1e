package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.protocol.BlockStatusDescriptor;
import io.jnbd.protocol.Nbd;
import io.jnbd.protocol.Request;
import io.jnbd.server.backend.BitmapsForTests;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.backend.MetaExtent;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Metadata contexts beyond {@code base:allocation}, on the wire: LIST and SET with each query form against an export
 * whose backend answers two dirty bitmaps, and block status with one chunk per selected context.
 */
@Timeout(60)
class MetaContextTest {
    private static final int K = 1024;
    private static final String A = "qemu:dirty-bitmap:a";
    private static final String B = "qemu:dirty-bitmap:b";
    private static final String BASE = Nbd.CONTEXT_BASE_ALLOCATION;

    private BitmapsForTests bitmaps;
    private ServerFixture fx;

    @BeforeEach
    void start() throws IOException {
        // a: 64K clean, 128K dirty, the rest clean. b: 256K dirty, the rest clean.
        bitmaps = new BitmapsForTests(new MemoryBackend(1 << 20));
        bitmaps.put(A, List.of(new MetaExtent(64 * K, 0), new MetaExtent(128 * K, 1), new MetaExtent(832 * K, 0)));
        bitmaps.put(B, List.of(new MetaExtent(256 * K, 1), new MetaExtent(768 * K, 0)));
        fx = new ServerFixture(List.of(new Export("bm", "", bitmaps), new Export("plain", "", new MemoryBackend(1 << 20))));
    }

    @AfterEach
    void stop() {
        if (fx != null) fx.close();
    }

    @Test
    void listWithoutQueriesNamesBaseAllocationAndEveryContextOfTheBackend() throws IOException {
        try (RawClient c = structured()) {
            List<RawClient.OptionReply> all = c.optionUntilFinal(Nbd.OPT_LIST_META_CONTEXT, RawClient.metaContext("bm", List.of()));
            assertThat(all.getLast().type()).isEqualTo(Nbd.REP_ACK);
            assertThat(names(all)).containsExactly(BASE, A, B);
            // The spec reserves the id of a listed context.
            for (RawClient.OptionReply r : all.subList(0, all.size() - 1)) assertThat(r.data().getInt(0)).isZero();
            assertThat(names(c.optionUntilFinal(Nbd.OPT_LIST_META_CONTEXT, RawClient.metaContext("plain", List.of()))))
                .containsExactly(BASE);
        }
    }

    @Test
    void listMatchesNamespacesAndExactNames() throws IOException {
        try (RawClient c = structured()) {
            assertThat(list(c, "bm", "base:")).containsExactly(BASE);
            assertThat(list(c, "bm", "qemu:")).containsExactly(A, B);
            assertThat(list(c, "bm", "qemu:dirty-bitmap:")).containsExactly(A, B);
            assertThat(list(c, "bm", B)).containsExactly(B);
            assertThat(list(c, "bm", "base:", B)).containsExactly(BASE, B);
            // Unknown names and namespaces match nothing, and are no error.
            assertThat(list(c, "bm", "qemu:dirty-bitmap:zz", "x-other:", "qemu:allocation-depth", "qemu:dirty")).isEmpty();
            assertThat(list(c, "plain", "qemu:")).isEmpty();
        }
    }

    @Test
    void identityIsListedOnlyWhenAskedForAndNeverSelected() throws IOException {
        try (RawClient c = structured()) {
            List<String> bm = list(c, "bm", "jnbd:identity");
            assertThat(bm).singleElement().asString().matches("jnbd:identity:[0-9a-f]+");
            // A memory export's data dies with its backend: another backend is another identity.
            assertThat(list(c, "plain", "jnbd:identity")).singleElement().isNotEqualTo(bm.getFirst());
            assertThat(list(c, "bm", "jnbd:identity")).isEqualTo(bm);
            assertThat(list(c, "bm", "jnbd:")).isEmpty();
            assertThat(names(c.optionUntilFinal(Nbd.OPT_LIST_META_CONTEXT, RawClient.metaContext("bm", List.of()))))
                .doesNotContain(bm.getFirst());
            assertThat(set(c, "bm", "jnbd:identity", bm.getFirst())).isEmpty();
        }
    }

    @Test
    void aFileIsKnownByItsDeviceAndInodeWhateverTheBackendObject(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir)
            throws IOException {
        java.nio.file.Path image = dir.resolve("disk.img");
        java.nio.file.Path link = dir.resolve("link.img");
        try (var a = new io.jnbd.server.backend.FileBackend(image, io.jnbd.server.backend.FileBackend.Mode.CACHED, false, 1 << 20);
             var b = new io.jnbd.server.backend.FileBackend(image, io.jnbd.server.backend.FileBackend.Mode.CACHED, true, 0)) {
            java.nio.file.Files.createLink(link, image);
            try (var c = new io.jnbd.server.backend.FileBackend(link, io.jnbd.server.backend.FileBackend.Mode.CACHED, false, 0)) {
                assertThat(a.identity()).isNotNull().isEqualTo(b.identity()).isEqualTo(c.identity());
            }
            java.nio.file.Path other = dir.resolve("other.img");
            try (var d = new io.jnbd.server.backend.FileBackend(other, io.jnbd.server.backend.FileBackend.Mode.CACHED, false, 1 << 20)) {
                assertThat(d.identity()).isNotEqualTo(a.identity());
            }
        }
    }

    @Test
    void queryWithoutNamespaceIsInvalid() throws IOException {
        try (RawClient c = structured()) {
            for (int option : new int[] {Nbd.OPT_LIST_META_CONTEXT, Nbd.OPT_SET_META_CONTEXT}) {
                for (String q : List.of("dirty-bitmap", ":a")) {
                    assertThat(c.optionUntilFinal(option, RawClient.metaContext("bm", List.of(A, q))))
                        .extracting(RawClient.OptionReply::type).containsExactly(Nbd.REP_ERR_INVALID);
                }
            }
            assertThat(list(c, "bm", A)).containsExactly(A);
        }
    }

    @Test
    void setSelectsExactNamesOnlyAndIgnoresUnknownOnes() throws IOException {
        try (RawClient c = structured()) {
            // Wildcards list, but do not select.
            List<RawClient.OptionReply> none = c.optionUntilFinal(Nbd.OPT_SET_META_CONTEXT,
                RawClient.metaContext("bm", List.of("base:", "qemu:", "qemu:dirty-bitmap:", "qemu:dirty-bitmap:zz", "x-y:z")));
            assertThat(none).extracting(RawClient.OptionReply::type).containsExactly(Nbd.REP_ACK);
            go(c, "bm");
            assertThat(c.command(Nbd.CMD_BLOCK_STATUS, 0, 0, 4096)).isEqualTo(Nbd.EINVAL);
        }
    }

    @Test
    void blockStatusAnswersOneChunkPerSelectedContext() throws IOException {
        try (RawClient c = structured()) {
            Map<String, Integer> ids = set(c, "bm", A, BASE, "qemu:dirty-bitmap:nope", B, A);
            assertThat(ids).containsOnlyKeys(BASE, A, B);
            assertThat(ids.values()).doesNotContain(0).doesNotHaveDuplicates();
            go(c, "bm");
            assertThat(c.write(0, new byte[4096], 0)).isZero(); // base:allocation: 64K of data, then holes

            Map<Integer, List<BlockStatusDescriptor>> status = blockStatus(c, 0, 0, 512 * K);
            assertThat(status).containsOnlyKeys(ids.values());
            assertThat(status.get(ids.get(A))).containsExactly(d(64 * K, 0), d(128 * K, 1), d(320 * K, 0));
            assertThat(status.get(ids.get(B))).containsExactly(d(256 * K, 1), d(256 * K, 0));
            assertThat(status.get(ids.get(BASE))).containsExactly(d(64 * K, 0), d(448 * K, Nbd.STATE_HOLE | Nbd.STATE_ZERO));

            // From an offset inside runs, cut to a length that ends inside them.
            status = blockStatus(c, 0, 96 * K, 100 * K);
            assertThat(status.get(ids.get(A))).containsExactly(d(96 * K, 1), d(4 * K, 0));
            assertThat(status.get(ids.get(B))).containsExactly(d(100 * K, 1));
            assertThat(status.get(ids.get(BASE))).containsExactly(d(100 * K, Nbd.STATE_HOLE | Nbd.STATE_ZERO));
        }
    }

    @Test
    void reqOneAnswersOneDescriptorPerContextWithinTheLength() throws IOException {
        try (RawClient c = structured()) {
            Map<String, Integer> ids = set(c, "bm", A, B);
            go(c, "bm");
            Map<Integer, List<BlockStatusDescriptor>> status = blockStatus(c, Nbd.CMD_FLAG_REQ_ONE, 32 * K, 512 * K);
            assertThat(status.get(ids.get(A))).containsExactly(d(32 * K, 0));
            assertThat(status.get(ids.get(B))).containsExactly(d(224 * K, 1));
            status = blockStatus(c, Nbd.CMD_FLAG_REQ_ONE, 128 * K, 16 * K);
            assertThat(status.get(ids.get(A))).containsExactly(d(16 * K, 1));
            assertThat(status.get(ids.get(B))).containsExactly(d(16 * K, 1));
        }
    }

    @Test
    void contextRemovedAfterSetAnswersWithItsErrorAndTheConnectionGoesOn() throws IOException {
        try (RawClient c = structured()) {
            Map<String, Integer> ids = set(c, "bm", A, B);
            go(c, "bm");
            bitmaps.remove(B);

            long cookie = c.cookie();
            c.send(new Request(0, Nbd.CMD_BLOCK_STATUS, cookie, 0, 512 * K));
            RawClient.Reply r = c.readReply();
            assertThat(r.cookie()).isEqualTo(cookie);
            assertThat(r.error()).isEqualTo(Nbd.EINVAL);
            assertThat(r.chunks()).hasSize(2);
            assertThat(r.chunks()).filteredOn(RawClient.Chunk::done).hasSize(1);
            assertThat(r.chunks().getLast().done()).isTrue();
            RawClient.Chunk ok = r.chunks().stream().filter(ch -> ch.type() == Nbd.REPLY_TYPE_BLOCK_STATUS).findFirst().orElseThrow();
            assertThat(ok.blockStatus().contextId()).isEqualTo(ids.get(A));
            assertThat(ok.blockStatus().descriptors()).containsExactly(d(64 * K, 0), d(128 * K, 1), d(320 * K, 0));
            RawClient.Chunk failed = r.chunks().stream().filter(ch -> ch.type() == Nbd.REPLY_TYPE_ERROR).findFirst().orElseThrow();
            assertThat(failed.error().message()).contains(B);

            // The same connection still serves, block status included.
            assertThat(c.write(4096, new byte[] {7}, 0)).isZero();
            assertThat(c.read(4096, 1)).containsExactly(7);
            bitmaps.put(B, List.of(new MetaExtent(1 << 20, 1)));
            assertThat(blockStatus(c, 0, 0, 8 * K).get(ids.get(B))).containsExactly(d(8 * K, 1));
        }
    }

    @Test
    void idsStayTheSameAcrossSetsAndTheLastSetAlone() throws IOException {
        try (RawClient c = structured()) {
            int b = set(c, "bm", B).get(B);
            Map<String, Integer> again = set(c, "bm", A, B);
            assertThat(again.get(B)).isEqualTo(b);
            assertThat(again.get(A)).isNotEqualTo(b);
            assertThat(set(c, "bm", BASE, A)).isEqualTo(Map.of(BASE, MetaContexts.BASE_ALLOCATION_ID, A, again.get(A)));
            go(c, "bm");
            assertThat(blockStatus(c, 0, 0, 4096)).containsOnlyKeys(MetaContexts.BASE_ALLOCATION_ID, again.get(A));
        }
    }

    @Test
    void aFailedSetLeavesNothingSelected() throws IOException {
        try (RawClient c = structured()) {
            set(c, "bm", A, B);
            assertThat(c.optionUntilFinal(Nbd.OPT_SET_META_CONTEXT, RawClient.metaContext("bm", List.of(A, "nonamespace"))))
                .extracting(RawClient.OptionReply::type).containsExactly(Nbd.REP_ERR_INVALID);
            go(c, "bm");
            assertThat(c.command(Nbd.CMD_BLOCK_STATUS, 0, 0, 4096)).isEqualTo(Nbd.EINVAL);
        }
    }

    @Test
    void contextsAddedWhileTheServerRunsAreListedAndSelectable() throws IOException {
        String added = "qemu:dirty-bitmap:c";
        bitmaps.put(added, List.of(new MetaExtent(1 << 20, 1)));
        try (RawClient c = structured()) {
            assertThat(list(c, "bm", "qemu:dirty-bitmap:")).containsExactly(A, B, added);
            int id = set(c, "bm", added).get(added);
            go(c, "bm");
            assertThat(blockStatus(c, 0, 512 * K, 4096)).isEqualTo(Map.of(id, List.of(d(4096, 1))));
        }
    }

    /**
     * A selection holds for the export name the client used, not for whatever export that name reached: the default
     * export asked for as "" and as "bm" are one export, but a SET for one does not carry to a GO for the other (as
     * {@code boot/pc42} and {@code boot/pc43} are one cow export and two disks).
     */
    @Test
    void aSelectionHoldsOnlyForTheExportNameItWasMadeFor() throws IOException {
        try (NbdServer server = new NbdServer(new Exports(List.of(new Export("bm", "", bitmaps)), "bm"), ServerConfig.defaults())) {
            var address = server.listen(new java.net.InetSocketAddress("127.0.0.1", 0));
            try (RawClient c = RawClient.connect(address)) {
                structured(c);
                set(c, "", A);
                go(c, "bm");
                assertThat(c.command(Nbd.CMD_BLOCK_STATUS, 0, 0, 4096)).as("selected for \"\", not for \"bm\"").isEqualTo(Nbd.EINVAL);
            }
            try (RawClient c = RawClient.connect(address)) {
                structured(c);
                int id = set(c, "", A).get(A);
                go(c, "");
                assertThat(blockStatus(c, 0, 0, 4096)).isEqualTo(Map.of(id, List.of(d(4096, 0))));
            }
        }
    }

    // ---------------------------------------------------------------- helpers

    private RawClient structured() throws IOException {
        return structured(RawClient.connect(fx.address));
    }

    private static RawClient structured(RawClient c) throws IOException {
        c.greeting();
        c.clientFlags(Nbd.FLAG_C_FIXED_NEWSTYLE | Nbd.FLAG_C_NO_ZEROES);
        assertThat(c.option(Nbd.OPT_STRUCTURED_REPLY, new byte[0]).type()).isEqualTo(Nbd.REP_ACK);
        c.structured = true;
        return c;
    }

    private static void go(RawClient c, String export) throws IOException {
        assertThat(c.optionUntilFinal(Nbd.OPT_GO, RawClient.exportRequest(export, List.of())).getLast().type())
            .isEqualTo(Nbd.REP_ACK);
    }

    private static List<String> list(RawClient c, String export, String... queries) throws IOException {
        List<RawClient.OptionReply> replies = c.optionUntilFinal(Nbd.OPT_LIST_META_CONTEXT, RawClient.metaContext(export, List.of(queries)));
        assertThat(replies.getLast().type()).isEqualTo(Nbd.REP_ACK);
        return names(replies);
    }

    /** SETs {@code queries} and returns the contexts selected, by name, with their ids. */
    private static Map<String, Integer> set(RawClient c, String export, String... queries) throws IOException {
        List<RawClient.OptionReply> replies = c.optionUntilFinal(Nbd.OPT_SET_META_CONTEXT, RawClient.metaContext(export, List.of(queries)));
        assertThat(replies.getLast().type()).isEqualTo(Nbd.REP_ACK);
        Map<String, Integer> ids = new LinkedHashMap<>();
        for (RawClient.OptionReply r : replies.subList(0, replies.size() - 1)) {
            assertThat(r.type()).isEqualTo(Nbd.REP_META_CONTEXT);
            assertThat(ids.put(name(r), r.data().getInt(0))).as("context sent twice").isNull();
        }
        return ids;
    }

    private static List<String> names(List<RawClient.OptionReply> replies) {
        List<String> out = new ArrayList<>();
        for (RawClient.OptionReply r : replies) {
            if (r.type() == Nbd.REP_META_CONTEXT) out.add(name(r));
        }
        return out;
    }

    private static String name(RawClient.OptionReply r) {
        ByteBuffer d = r.data().duplicate();
        d.getInt();
        byte[] b = new byte[d.remaining()];
        d.get(b);
        return new String(b, StandardCharsets.UTF_8);
    }

    /**
     * A successful block status reply's descriptors by context id, checking that each context has exactly one
     * chunk and only the last chunk ends the reply.
     */
    private static Map<Integer, List<BlockStatusDescriptor>> blockStatus(RawClient c, int flags, long offset, long length)
            throws IOException {
        long cookie = c.cookie();
        c.send(new Request(flags, Nbd.CMD_BLOCK_STATUS, cookie, offset, length));
        RawClient.Reply r = c.readReply();
        assertThat(r.cookie()).isEqualTo(cookie);
        assertThat(r.error()).isZero();
        Map<Integer, List<BlockStatusDescriptor>> out = new LinkedHashMap<>();
        for (int i = 0; i < r.chunks().size(); i++) {
            RawClient.Chunk ch = r.chunks().get(i);
            assertThat(ch.type()).isEqualTo(Nbd.REPLY_TYPE_BLOCK_STATUS);
            assertThat(ch.done()).isEqualTo(i == r.chunks().size() - 1);
            assertThat(out.put(ch.blockStatus().contextId(), ch.blockStatus().descriptors())).as("one chunk per context").isNull();
        }
        return out;
    }

    private static BlockStatusDescriptor d(long length, int flags) {
        return new BlockStatusDescriptor(length, flags);
    }
}
