package io.jnbd.cli;

import io.jnbd.client.Peer;
import io.jnbd.tls.TestPki;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/** info, copy and cmp with nbds:// URIs against nbdkit --tls=require: nothing to do but give the URI. */
class ToolsTlsInteropTest {

    @TempDir
    Path dir;
    private Path pki;
    private final List<Peer> peers = new ArrayList<>();

    @BeforeEach
    void makePki() throws Exception {
        Peer.assumeInterop("nbdkit");
        pki = Files.createDirectory(dir.resolve("pki"));
        TestPki.create(pki);
    }

    @AfterEach
    void stop() {
        for (Peer p : peers) p.close();
    }

    private Peer nbdkit(String... args) throws Exception {
        int port = Peer.freePort();
        Peer p = Peer.start(port, Peer.nbdkit(port, args));
        peers.add(p);
        return p;
    }

    private String nbds(Peer p, String query) {
        return "nbds://localhost:" + p.port + "/?" + query;
    }

    @Test
    void infoCopyAndCmpOverTls() throws Exception {
        Peer pattern = nbdkit("--tls=require", "--tls-certificates=" + pki, "pattern", "size=8M");
        Peer memory = nbdkit("--tls=require", "--tls-certificates=" + pki, "memory", "size=8M");
        String source = nbds(pattern, "tls-certificates=" + pki);
        String target = nbds(memory, "tls-certificates=" + pki);

        Run info = Run.jnbd("info", source);
        assertThat(info.exit()).as(info.toString()).isZero();
        assertThat(info.out()).contains("size:", "8388608").containsPattern("(?m)^tls: +TLSv1\\.[23] ");
        Run json = Run.jnbd("info", "--json", source);
        assertThat(json.out()).containsPattern("\"tls\": \"TLSv1\\.[23] [A-Z0-9_]+\"");
        assertThat(Run.jnbd("info", "--json", "nbd://127.0.0.1:" + nbdkit("memory", "size=1M").port + "/").out())
            .contains("\"tls\": null");

        Path file = dir.resolve("copy.img");
        Run down = Run.jnbd("copy", source, file.toString());
        assertThat(down.exit()).as(down.toString()).isZero();
        java.nio.ByteBuffer b = java.nio.ByteBuffer.wrap(Files.readAllBytes(file));
        for (int i = 0; i < b.capacity(); i += 8 * 1021) assertThat(b.getLong(i)).isEqualTo(i);
        Run up = Run.jnbd("copy", file.toString(), target);
        assertThat(up.exit()).as(up.toString()).isZero();
        assertThat(Run.jnbd("cmp", source, target).exit()).isZero();
        assertThat(Run.jnbd("cmp", file.toString(), target).exit()).isZero();
    }

    @Test
    void tlsFailuresAreOneLine() throws Exception {
        Peer tls = nbdkit("--tls=require", "--tls-certificates=" + pki, "memory", "size=1M");
        Path otherCa = Files.createDirectory(dir.resolve("other-ca"));
        TestPki.newCa("another CA").writeCa(otherCa);
        Run refused = Run.jnbd("info", nbds(tls, "tls-certificates=" + otherCa));
        assertThat(refused.exit()).isEqualTo(1);
        assertThat(refused.err().strip()).as(refused.toString())
            .startsWith("jnbd: TLS handshake with localhost:" + tls.port + " failed: ").doesNotContain("\n");

        Peer plain = nbdkit("memory", "size=1M");
        Run noTls = Run.jnbd("copy", nbds(plain, "tls-certificates=" + pki), dir.resolve("out.img").toString());
        assertThat(noTls.exit()).isEqualTo(1);
        assertThat(noTls.err().strip()).as(noTls.toString())
            .startsWith("jnbd: server at localhost:" + plain.port + " does not offer TLS").doesNotContain("\n");

        Run plainClient = Run.jnbd("info", tls.uri(""));
        assertThat(plainClient.exit()).isEqualTo(1);
        assertThat(plainClient.err()).contains("server requires TLS (use an nbds:// URI)");
    }
}
