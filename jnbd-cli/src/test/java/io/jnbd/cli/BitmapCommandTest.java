package io.jnbd.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.server.Export;
import io.jnbd.server.Exports;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.control.ControlEndpoint;
import io.jnbd.server.control.FakeDirtyBitmaps;
import io.jnbd.server.filter.dirty.DirtyBitmaps.Info;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/**
 * {@code jnbd bitmap} against a control endpoint whose export keeps its bitmaps in a list (the dirty filter is not
 * needed to test the command), and {@code jnbd serve --control} end to end.
 */
@Timeout(60)
class BitmapCommandTest {
    @TempDir
    Path dir;

    @Test
    void eachOperationAndItsOutput() throws Exception {
        FakeDirtyBitmaps vm0 = new FakeDirtyBitmaps();
        Path socket = dir.resolve("jnbd.ctl");
        try (ControlEndpoint control = ControlEndpoint.bind(socket)) {
            control.serve(new Exports(List.of(new Export("vm0", "", vm0), new Export("plain", "", new MemoryBackend(1 << 20))), null));
            String c = "--control=" + socket;

            Run empty = Run.jnbd("bitmap", "list", c, "vm0");
            assertThat(empty.exit()).as(empty.toString()).isZero();
            assertThat(empty.out()).isEqualTo("export 'vm0' has no bitmaps\n");

            Run add = Run.jnbd("bitmap", "add", c, "vm0", "b-monday");
            assertThat(add.exit()).as(add.toString()).isZero();
            assertThat(add.out()).isEqualTo("vm0: bitmap 'b-monday' added, recording\n");
            vm0.dirty("b-monday", 5 << 20);

            Run rotate = Run.jnbd("bitmap", "rotate", c, "vm0", "b-monday", "b-tuesday");
            assertThat(rotate.exit()).as(rotate.toString()).isZero();
            assertThat(rotate.out()).isEqualTo("vm0: bitmap 'b-monday' frozen, 'b-tuesday' recording\n");

            Run list = Run.jnbd("bitmap", "list", c, "vm0");
            assertThat(list.out()).isEqualTo("""
                BITMAP     STATE      GRANULARITY  DIRTY
                b-monday   frozen           65536  5242880 bytes (5.0 MiB)
                b-tuesday  recording        65536  0 bytes
                """);
            Run json = Run.jnbd("bitmap", "list", "--json", c, "vm0");
            assertThat(json.out()).isEqualTo("{\"export\": \"vm0\", \"bitmaps\": [{\"name\": \"b-monday\", \"recording\": false, "
                + "\"granularity\": 65536, \"dirty_bytes\": 5242880}, {\"name\": \"b-tuesday\", \"recording\": true, "
                + "\"granularity\": 65536, \"dirty_bytes\": 0}]}\n");

            assertThat(Run.jnbd("bitmap", "clear", c, "vm0", "b-monday").out()).isEqualTo("vm0: bitmap 'b-monday' cleared\n");
            assertThat(Run.jnbd("bitmap", "remove", c, "vm0", "b-monday").out()).isEqualTo("vm0: bitmap 'b-monday' removed\n");
            assertThat(vm0.list()).containsExactly(new Info("b-tuesday", true, 65536, 0));

            assertFails(Run.jnbd("bitmap", "list", c, "nope"), "no export 'nope' (exports: vm0, plain)");
            assertFails(Run.jnbd("bitmap", "add", c, "plain", "b0"),
                "export 'plain' has no dirty filter (serve it with filter=dirty,dirty-bitmap=NAME)");
            assertFails(Run.jnbd("bitmap", "clear", c, "vm0", "b-monday"), "export 'vm0' has no bitmap 'b-monday' (its bitmaps: b-tuesday)");
            assertFails(Run.jnbd("bitmap", "rotate", c, "vm0", "b-tuesday", "b-tuesday"), "export 'vm0' already has a bitmap 'b-tuesday'");
            assertFails(Run.jnbd("bitmap", "add", c, "vm0", "fail-disk"), "export 'vm0': add failed: No space left on device");
        }
        Path gone = dir.resolve("jnbd.ctl");
        assertFails(Run.jnbd("bitmap", "list", "--control=" + gone, "vm0"),
            "no server control socket at " + gone + " (is the server running with --control=" + gone + "?)");
    }

    private static void assertFails(Run r, String line) {
        assertThat(r.exit()).as(r.toString()).isEqualTo(1);
        assertThat(r.out()).isEmpty();
        assertThat(r.err()).isEqualTo("jnbd bitmap: " + line + "\n");
    }

    @Test
    void usageMistakesExitTwo() {
        Run noName = Run.jnbd("bitmap", "rotate", "--control=" + dir.resolve("x"), "vm0", "b0");
        assertThat(noName.exit()).as(noName.toString()).isEqualTo(2);
        assertThat(noName.err()).contains("Missing required parameter: 'NEXT'");
        Run noOp = Run.jnbd("bitmap", "frob");
        assertThat(noOp.exit()).isEqualTo(2);
        if (System.getenv("JNBD_CONTROL") == null) {
            Run noSocket = Run.jnbd("bitmap", "list", "vm0");
            assertThat(noSocket.exit()).as(noSocket.toString()).isEqualTo(2);
            assertThat(noSocket.err()).startsWith("jnbd: no control socket: give --control=PATH");
        }
    }

    @Test
    void helpTeachesWithExamples() {
        Run help = Run.jnbd("bitmap", "--help");
        assertThat(help.exit()).isZero();
        assertThat(help.out()).contains("list", "add", "clear", "rotate", "remove", "$JNBD_CONTROL",
            "jnbd bitmap rotate --control=/run/jnbd.ctl vm0 b-monday b-tuesday");
        assertThat(Run.jnbd("bitmap", "rotate", "--help").out()).contains("every write lands in exactly one");
        assertThat(Run.jnbd("serve", "--help").out()).contains("--control=PATH", "jnbd bitmap");
    }

    @Test
    void serveWithControlEndToEnd() throws Exception {
        Path socket = dir.resolve("serve.ctl");
        CommandLine command = new CommandLine(new ServeCommand());
        command.parseArgs("--listen", "127.0.0.1:0", "--export", "m=memory:1M", "--control", socket.toString());
        Serving serving = Serving.open(command.getCommandSpec(), ServeSettings.resolve(command.getCommandSpec(), null));
        try {
            assertThat(serving.listen()).isTrue();
            assertThat(serving.banner()).contains("Control socket: jnbd bitmap list --control=" + socket + " EXPORT");
            assertFails(Run.jnbd("bitmap", "list", "--control=" + socket, "m"),
                "export 'm' has no dirty filter (serve it with filter=dirty,dirty-bitmap=NAME)");

            // A second server on the same control path stops before it opens anything.
            CommandLine second = new CommandLine(new ServeCommand());
            second.parseArgs("--listen", "127.0.0.1:0", "--export", "n=file:" + dir.resolve("n.img") + ",size=1M", "--control", socket.toString());
            assertThatThrownBy(() -> Serving.open(second.getCommandSpec(), ServeSettings.resolve(second.getCommandSpec(), null)))
                .isInstanceOf(Serving.StartFailed.class)
                .hasMessage("--control: another server is listening on control socket " + socket);
            assertThat(dir.resolve("n.img")).as("no export opened").doesNotExist();
        } finally {
            serving.stop(Duration.ofSeconds(5));
            serving.server().awaitStop();
            serving.closeEndpoints();
        }
        assertThat(socket).as("removed at stop").doesNotExist();
    }

    @Test
    void controlIsAConfigKey() throws Exception {
        Path file = java.nio.file.Files.writeString(dir.resolve("jnbd.toml"), "control = \"/run/jnbd.ctl\"\n[export]\nm = \"memory:1M\"\n");
        Run check = Run.jnbd("serve", "--config", file.toString(), "--check");
        assertThat(check.exit()).as(check.toString()).isZero();
        assertThat(check.out()).contains("control = \"/run/jnbd.ctl\"  # " + file + ":1");
    }
}
