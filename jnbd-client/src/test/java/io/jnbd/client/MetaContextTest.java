package io.jnbd.client;

import io.jnbd.protocol.Nbd;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Metadata contexts beyond base:allocation against {@link FakeNbdServer}'s one dirty bitmap. */
class MetaContextTest {

    private static final int SIZE = 1 << 20;
    private static final int B = FakeNbdServer.CHUNK;

    private static FakeNbdServer server() throws Exception {
        var server = new FakeNbdServer(FakeNbdServer.content(SIZE), FakeNbdServer.Mode.REVERSE);
        server.dirty.set(1, 3);   // [4k, 12k)
        server.dirty.set(10);     // [40k, 44k)
        server.dirty.set(255);    // the last block
        return server;
    }

    @Test
    void aBitmapAskedForIsNegotiatedBesideBaseAllocationAndReadWithItsRawFlags() throws Exception {
        try (var server = server();
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withMetaContexts(FakeNbdServer.BITMAP))) {
            assertThat(client.metaContexts()).containsExactlyInAnyOrder(Nbd.CONTEXT_BASE_ALLOCATION, FakeNbdServer.BITMAP);
            List<MetaExtent> map = client.blocking().metaExtents(FakeNbdServer.BITMAP, 0, SIZE);
            assertThat(map).containsExactly(
                new MetaExtent(0, B, 0), new MetaExtent(B, 2 * B, 1), new MetaExtent(3 * B, 7 * B, 0),
                new MetaExtent(10 * B, B, 1), new MetaExtent(11 * B, 244L * B, 0), new MetaExtent(255L * B, B, 1));
            assertThat(map.get(1).has(MetaExtent.DIRTY)).isTrue();
            // The same replies carry base:allocation's chunk; the old API still reads it.
            assertThat(client.blocking().extents(0, 5 * B)).extracting(Extent::zero).containsExactly(true, false, false, true, false);
        }
    }

    @Test
    void oneRequestIsClippedToTheRangeAskedFor() throws Exception {
        try (var server = server();
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withMetaContexts(FakeNbdServer.BITMAP))) {
            // Unaligned: the fake answers to the end of the request's last block; the client clips.
            assertThat(client.blockStatus(FakeNbdServer.BITMAP, 5000, 10_000).get(5, TimeUnit.SECONDS))
                .containsExactly(new MetaExtent(5000, 3 * B - 5000, 1), new MetaExtent(3 * B, 15_000 - 3 * B, 0));
        }
    }

    @Test
    void aContextNotNegotiatedIsRefusedNamingThoseThatWere() throws Exception {
        try (var server = server();
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withMetaContexts("qemu:dirty-bitmap:nope"))) {
            assertThat(client.metaContexts()).containsExactly(Nbd.CONTEXT_BASE_ALLOCATION);
            assertThatThrownBy(() -> client.blocking().blockStatus("qemu:dirty-bitmap:nope", 0, SIZE))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("'qemu:dirty-bitmap:nope' was not negotiated")
                .hasMessageEndingWith("these were: base:allocation");
            assertThatThrownBy(() -> client.metaExtents(FakeNbdServer.BITMAP, 0, SIZE))
                .isInstanceOf(IllegalArgumentException.class);
            // The connection is still good.
            assertThat(client.blocking().extents(0, B)).hasSize(1);
        }
    }

    @Test
    void withoutStructuredRepliesNoContextIsNegotiated() throws Exception {
        try (var server = server();
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withStructuredReplies(false)
                 .withMetaContexts(FakeNbdServer.BITMAP))) {
            assertThat(client.metaContexts()).isEmpty();
            assertThatThrownBy(() -> client.blockStatus(FakeNbdServer.BITMAP, 0, B))
                .isInstanceOf(IllegalArgumentException.class).hasMessageEndingWith("none was");
        }
    }

    @Test
    void listingFindsTheBitmapsByTheirNamespace() throws Exception {
        try (var server = server()) {
            NbdUri uri = NbdUri.parse(server.uri());
            assertThat(NbdClient.listMetaContexts(uri, ClientOptions.defaults(), "qemu:dirty-bitmap:"))
                .containsExactly(FakeNbdServer.BITMAP);
            assertThat(NbdClient.listMetaContexts(uri, ClientOptions.defaults()))
                .containsExactlyInAnyOrder(Nbd.CONTEXT_BASE_ALLOCATION, FakeNbdServer.BITMAP);
            assertThat(NbdClient.listMetaContexts(uri, ClientOptions.defaults(), "qemu:allocation-depth")).isEmpty();
            // The listing connection ended cleanly: the server serves the next client.
            try (var client = NbdClient.connect(server.uri())) {
                assertThat(client.size()).isEqualTo(SIZE);
            }
        }
    }

    @Test
    void aChunkForAContextNeverNegotiatedIsAProtocolViolation() throws Exception {
        try (var server = server();
             var client = NbdClient.connect(server.uri(), ClientOptions.defaults().withMetaContexts(FakeNbdServer.BITMAP))) {
            server.strayContext = true;
            assertThatThrownBy(() -> client.blocking().blockStatus(FakeNbdServer.BITMAP, 0, B))
                .isInstanceOf(NbdProtocolException.class).hasMessageContaining("context id 99, which was not negotiated");
            assertThat(client.connected()).isFalse();
        }
    }

    @Test
    void optionsKeepTheContextsOnceEachAndRefuseEmptyNames() {
        assertThat(ClientOptions.defaults().withMetaContexts("a:b", "a:b", "c:d").withConnections(2).metaContexts())
            .containsExactly("a:b", "c:d");
        assertThatThrownBy(() -> ClientOptions.defaults().withMetaContexts("")).isInstanceOf(IllegalArgumentException.class);
    }
}
