package io.jnbd.cli;

import io.jnbd.server.Export;
import io.jnbd.server.ExportSpec;
import io.jnbd.server.Exports;
import io.jnbd.server.NbdServer;
import io.jnbd.server.ServerConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.RandomAccessFile;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Random;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.jnbd.pool.memserver.MemServer;

import static org.assertj.core.api.Assertions.assertThat;

/** info, copy and cmp against jnbd's own server, run in the same JVM: no peers needed. */
class ToolsOnJnbdServerTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    @Test
    void copyUpAndDownIsByteIdentical(@TempDir Path dir) throws Exception {
        Path src = dir.resolve("src.img");
        byte[] block = new byte[3 << 20];
        new Random(3).nextBytes(block);
        try (RandomAccessFile f = new RandomAccessFile(src.toFile(), "rw")) {
            f.setLength(32L << 20);
            f.seek(5L << 20);
            f.write(block);
        }
        List<Export> exports = List.of(ExportSpec.parse("disk=memory:32M").openExport(),
            ExportSpec.parse("split=file:" + src + ",split=64K,chunk=16K,streams=4,mode=direct").openExport());
        try (NbdServer server = new NbdServer(new Exports(exports, "disk"), ServerConfig.defaults())) {
            int port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))).getPort();
            String disk = "nbd://127.0.0.1:" + port + "/disk";

            Run info = Run.jnbd("info", "--json", disk);
            assertThat(info.out()).contains("\"size\": 33554432", "\"export\": \"disk\"");

            assertThat(Run.jnbd("copy", src.toString(), disk).exit()).isZero();
            Path back = dir.resolve("back.img");
            Run down = Run.jnbd("copy", "--connections", "3", disk, back.toString());
            assertThat(down.exit()).as(down.toString()).isZero();
            assertThat(Files.mismatch(src, back)).isEqualTo(-1);
            assertThat(Run.jnbd("cmp", src.toString(), disk).exit()).isZero();
            // The split export answers reads with out-of-order chunks.
            assertThat(Run.jnbd("cmp", "nbd://127.0.0.1:" + port + "/split", disk).exit()).isZero();
        }
    }

    @Test
    void infoJsonKeepsItsKeysAndParses() throws Exception {
        List<Export> exports = List.of(ExportSpec.parse("disk=memory:32M").openExport(),
            ExportSpec.parse("other=memory:1M,description=say \"hi\"").openExport());
        try (NbdServer server = new NbdServer(new Exports(exports, "disk"), ServerConfig.defaults())) {
            int port = ((InetSocketAddress) server.listen(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0))).getPort();
            Run info = Run.jnbd("info", "--json", "nbd://127.0.0.1:" + port + "/disk");
            assertThat(info.exit()).as(info.toString()).isZero();
            // One line, keys in the order docs/client.md gives them: scripts grep it as well as parse it.
            assertThat(info.out().strip()).doesNotContain("\n").startsWith("{\"uri\": ");
            JsonNode doc = JSON.readTree(info.out());
            assertThat(doc.fieldNames()).toIterable().containsExactly("uri", "export", "description", "size", "flags",
                "transmission_flags", "block_size", "structured_replies", "base_allocation", "tls");
            assertThat(doc.get("size").asLong()).isEqualTo(32L << 20);
            assertThat(doc.get("export").asText()).isEqualTo("disk");
            assertThat(doc.get("flags")).extracting(JsonNode::asText).contains("HAS_FLAGS", "SEND_FLUSH");
            assertThat(doc.get("transmission_flags").asInt() & 1).isOne();
            assertThat(doc.get("block_size").fieldNames()).toIterable().containsExactly("minimum", "preferred", "maximum");
            assertThat(doc.get("structured_replies").isBoolean()).isTrue();
            assertThat(doc.get("tls").isNull()).isTrue();

            Run list = Run.jnbd("info", "--list", "--json", "nbd://127.0.0.1:" + port);
            assertThat(list.exit()).as(list.toString()).isZero();
            JsonNode listed = JSON.readTree(list.out()).get("exports");
            assertThat(listed).extracting(e -> e.get("name").asText()).containsExactlyInAnyOrder("disk", "other");
            // Quotes in a description come out escaped, and back in one piece.
            assertThat(listed).extracting(e -> e.get("description").asText()).contains("say \"hi\"");
        }
    }

    @Test
    void poolStatusJsonOfMemoryServersIsOneArray() throws Exception {
        try (MemServer memory = MemServer.start(MemServer.Config.ofMemory(16L << 20), ServerConfig.defaults())) {
            int port = ((InetSocketAddress) memory.listen(new InetSocketAddress("127.0.0.1", 0))).getPort();
            int nobody;
            try (var s = new java.net.ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
                nobody = s.getLocalPort(); // closed again: nothing listens there
            }
            Run r = Run.jnbd("pool", "status", "--json", "127.0.0.1:" + port, "127.0.0.1:" + nobody);
            assertThat(r.exit()).as(r.toString()).isEqualTo(1);
            JsonNode docs = JSON.readTree(r.out());
            assertThat(docs.isArray()).isTrue();
            assertThat(docs).hasSize(2);
            assertThat(docs.get(0).get("ram_bytes").asLong()).isEqualTo(16L << 20);
            assertThat(docs.get(1).get("address").asText()).isEqualTo("127.0.0.1:" + nobody);
            assertThat(docs.get(1).get("error").asText()).isNotBlank();
        }
    }
}
