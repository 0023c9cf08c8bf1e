package io.jnbd.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.client.NbdClient;
import io.jnbd.client.NbdErrorException;
import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.FilterFactories;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/**
 * Filters as jnbd serve takes them: {@code filter=} in an {@code --export} and {@code filter = [...]} in a config
 * file's export table, the stacks {@code --check} shows, one line and exit 2 for a mistake, and a reload that
 * changes filters (or breaks them) while a client is connected.
 */
@Timeout(60)
class FilterConfigTest {
    @TempDir
    Path dir;

    @Test
    void checkShowsEachExportsStackAsARequestMeetsIt() {
        Run r = Run.jnbd("serve", "--export", "d=memory:1M,filter=delay,delay-read=5ms,filter=error,error=EIO,error-rate=10%",
            "--export", "plain=memory:1M", "--export", "ro=memory:1M,readonly", "--check");
        assertThat(r.exit()).as(r.toString()).isZero();
        assertThat(r.out()).contains("# Filter stacks, in the order a request meets them:\n"
                + "#   d: delay(read 5ms) -> error(EIO 10%) -> memory:1M\n"
                + "#   ro: readonly -> memory:1M\n")
            .doesNotContain("#   plain:")
            .contains("d = \"memory:1M,filter=delay,delay-read=5ms,filter=error,error=EIO,error-rate=10%\"");
    }

    @Test
    void serveHelpTellsHowToStackFilters() {
        Run r = Run.jnbd("serve", "--help");
        assertThat(r.out()).contains("  filter=NAME        put a filter in front of the backend; repeatable, the\n",
            "delay-read=", "error-pread[-rate|-file]=", "connection-rate=", "jnbd serve -e 'd=memory:1G,filter=delay,rdelay=5ms,filter=error,error-rate=1%'\n");
    }

    @Test
    void aMistakeInAFilterIsOneLineAndExitTwo() {
        assertRefused("d=memory:1M,filter=nope", "jnbd serve: export 'd': filter=nope: no such filter (use " + FilterFactories.nameList() + ")");
        assertRefused("d=memory:1M,filter=delay,delay-red=5ms", "jnbd serve: export 'd': unknown option 'delay-red' for a memory: export or its filters (delay)");
        assertRefused("d=memory:1M,error-rate=1", "jnbd serve: export 'd': error-rate= is a key of the error filter: add filter=error");
        assertRefused("d=memory:1M,filter=error,error-rate=110%", "jnbd serve: export 'd': error-rate=110% is not a rate from 0 to 1 (10%, 0.1 or 1:10)");
        assertRefused("d=memory:1M,filter=error,filter=error", "jnbd serve: export 'd': filter=error is named twice; a stack holds each filter once");
        assertRefused("d=memory:1M,filter=rate,rate=0", "jnbd serve: export 'd': rate=0: the rate must be above 0 (leave rate= out for no limit)");
        assertRefused("d=memory:1M,filter=rate,connection-rate=1.5M", "jnbd serve: export 'd': connection-rate=1.5M is not a rate in bits "
            + "per second (a whole number, with K, M, G, T, P or E for powers of 1024: 800M)");
        assertRefused("d=memory:1M,filter=rate,rate-file=/nonexistent/rate", "jnbd serve: export 'd': rate-file=/nonexistent/rate: no such file, "
            + "and no rate= to start from");
    }

    private static void assertRefused(String export, String line) {
        Run r = Run.jnbd("serve", "--export", export, "--check");
        assertThat(r.exit()).as(r.toString()).isEqualTo(2);
        assertThat(r.out()).isEmpty();
        assertThat(r.err()).isEqualTo(line + "\n");
    }

    @Test
    void aConfigFileStacksFiltersWithAList() throws IOException {
        Path f = dir.resolve("jnbd.toml");
        Files.writeString(f, """
            [export.d]
            memory = "1M"
            filter = ["delay", "error"]
            delay-read = "5ms"
            error = "ENOSPC"
            error-pwrite-rate = 0.5
            delay-fast-zero = false
            """);
        Run first = Run.jnbd("serve", "--config", f.toString(), "--check");
        assertThat(first.exit()).as(first.toString()).isZero();
        assertThat(first.out()).contains("#   d: delay(read 5ms) -> error(pwrite ENOSPC 50%) -> memory:1M\n");
        Run again = Run.jnbd("serve", "--config", Files.writeString(dir.resolve("again.toml"), first.out()).toString(), "--check");
        assertThat(again.exit()).as(again.toString()).isZero();
        assertThat(again.out().replaceAll("  # .*", "")).isEqualTo(first.out().replaceAll("  # .*", "").replace(f.toString(), dir.resolve("again.toml").toString()));

        Files.writeString(f, "[export.d]\nmemory = \"1M\"\nfilter = [\"delay\", \"eror\"]\n");
        Run bad = Run.jnbd("serve", "--config", f.toString(), "--check");
        assertThat(bad.exit()).isEqualTo(2);
        assertThat(bad.err()).isEqualTo(f + ":1: export 'd': filter=eror: no such filter (use " + FilterFactories.nameList() + ")\n");
    }

    @Test
    void aTableWithCommasInItsTargetWritesTheStackAsAList() throws IOException {
        var spec = io.jnbd.server.ExportSpec.parse("d", "memory:1M,filter=error,error-rate=1,filter=delay,rdelay=1,description=a, b");
        assertThat(TomlExport.table(spec)).isEqualTo("""
            [export.d]
            memory = "1M"
            filter = ["error", "delay"]
            error-rate = "1"
            rdelay = "1"
            description = "a, b"
            """);
        ConfigFile read = ConfigFile.read(Files.writeString(dir.resolve("t.toml"), TomlExport.table(spec)));
        assertThat(TomlExport.spec("d", read.exports().getFirst().value())).isEqualTo(spec);
    }

    @Test
    void aReloadChangesTheFiltersKeepingTheDataAndRefusesABrokenStackWhole() throws Exception {
        Path file = dir.resolve("jnbd.toml");
        config(file, "m = \"memory:1M,filter=delay\"");
        CommandLine command = new CommandLine(new ServeCommand());
        command.parseArgs("--config", file.toString());
        Serving serving = Serving.open(command.getCommandSpec(), ServeSettings.resolve(command.getCommandSpec(), file));
        try {
            assertThat(serving.listen()).isTrue();
            String uri = "nbd://127.0.0.1:" + ((InetSocketAddress) serving.bound().getFirst()).getPort() + "/m";
            try (NbdClient before = NbdClient.connect(uri)) {
                before.blocking().write(0, ByteBuffer.wrap(new byte[] {5, 6, 7}), false);

                config(file, "m = \"memory:1M,filter=error,error=ENOSPC,error-pwrite-rate=100%\"");
                Serving.Reload changed = serving.reload();
                assertThat(changed.applied()).as(changed.message()).isTrue();
                assertThat(changed.message()).contains("changed m (for new connections)").doesNotContain("reopened");
                try (NbdClient after = NbdClient.connect(uri)) {
                    assertThat(read(after)).as("the backend and its data were kept").containsExactly(5, 6, 7);
                    assertThatThrownBy(() -> after.blocking().write(0, ByteBuffer.wrap(new byte[] {1}), false))
                        .isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.ENOSPC));
                }
                before.blocking().write(0, ByteBuffer.wrap(new byte[] {8}), false);
                assertThat(read(before)).as("the connection from before goes on through its own chain").containsExactly(8, 6, 7);

                config(file, "m = \"memory:1M,filter=delay,delay-read=soon\"");
                Serving.Reload broken = serving.reload();
                assertThat(broken.applied()).isFalse();
                assertThat(broken.message()).contains("refused, the exports stay as they were",
                    "export 'm': delay-read=soon is not a delay");
                try (NbdClient still = NbdClient.connect(uri)) {
                    assertThatThrownBy(() -> still.blocking().write(0, ByteBuffer.wrap(new byte[] {1}), false))
                        .as("the stack from the last good reload").isInstanceOf(NbdErrorException.class);
                    assertThat(read(still)).containsExactly(8, 6, 7);
                }
            }
        } finally {
            serving.server().stop(Duration.ofSeconds(5));
        }
    }

    private static void config(Path file, String export) throws IOException {
        Files.writeString(file, "listen = [\"127.0.0.1:0\"]\n[export]\n" + export + "\n");
    }

    private static byte[] read(NbdClient client) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(3);
        client.blocking().read(0, b);
        return b.array();
    }
}
