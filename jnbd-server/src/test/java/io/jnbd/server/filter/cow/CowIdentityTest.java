package io.jnbd.server.filter.cow;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.ConnectionContext;
import io.jnbd.server.backend.NamedViews;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code cow-overlay=identity}: the overlay is the client's TLS identity's; the export's name alone opens it, a name
 * that is one of the client's identities too, another's never, and a client without TLS identity none.
 */
@Timeout(60)
class CowIdentityTest {
    @TempDir
    Path dir;

    @Test
    void anOverlayIsItsIdentitysAlone() throws Exception {
        Path base = dir.resolve("base.img");
        Files.write(base, new byte[1 << 20]);
        try (Backend chain = ExportSpec.parse("b", "file:" + base + ",filter=cow,cow-overlay=identity,cow-dir=" + dir.resolve("cow")).open()) {
            NamedViews views = (NamedViews) chain;
            assertThat(views.refusal(null, List.of())).as("no TLS identity").contains("TLS");
            assertThat(views.refusal("alice", List.of())).as("a name without TLS identity").contains("TLS");
            assertThat(views.refusal("alice", List.of("bob"))).as("another's overlay").contains("not this client's");
            assertThat(views.refusal(null, List.of("alice"))).isNull();
            assertThat(views.refusal("alice", List.of("alice", "alice.example.com"))).isNull();
            assertThat(views.refusal(null, List.of("../etc"))).as("an identity that makes no overlay name").contains("not allowed");

            Backend alice = chain.forConnection(new ConnectionContext(null, List.of("alice"), "a"));
            Backend bob = chain.forConnection(new ConnectionContext(null, List.of("bob"), "b"));
            alice.write(0, ByteBuffer.allocateDirect(3).put(new byte[] {1, 2, 3}).flip(), true);
            ByteBuffer seen = ByteBuffer.allocateDirect(3);
            bob.read(0, seen);
            assertThat(seen.get(0)).as("bob does not see alice's write").isZero();
            Backend aliceAgain = chain.forConnection(new ConnectionContext("alice", List.of("alice"), "a2"));
            seen.clear();
            aliceAgain.read(0, seen);
            assertThat(seen.get(2)).as("alice's second connection does").isEqualTo((byte) 3);
            for (Backend v : List.of(alice, bob, aliceAgain)) v.connectionClosed();
        }
        assertThat(dir.resolve("cow/clients/alice/map")).exists();
        assertThat(dir.resolve("cow/clients/bob/map")).exists();
    }
}
