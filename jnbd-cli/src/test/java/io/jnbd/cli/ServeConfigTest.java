package io.jnbd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;
import picocli.CommandLine.Model.OptionSpec;

/**
 * {@code jnbd serve --config FILE}: every option is a key of the file, the command line wins option by option,
 * {@code --check} prints what would run, and a mistake is one line naming file, line and key, with exit status 2
 * and nothing bound.
 */
class ServeConfigTest {
    @TempDir
    Path dir;

    private Path write(String name, String text) throws IOException {
        Path p = dir.resolve(name);
        Files.writeString(p, text);
        return p;
    }

    /** Every option of jnbd serve that is a setting, by its key. */
    private static List<String> settingKeys() {
        return new CommandLine(new ServeCommand()).getCommandSpec().options().stream()
            .map(OptionSpec::longestName).map(n -> n.substring(2))
            .filter(k -> !List.of("config", "check", "help", "version").contains(k)).toList();
    }

    @Test
    void theExampleInTheDocsHasEveryOptionAndChecksClean() throws IOException {
        String doc = Files.readString(Path.of("../docs/server.md"));
        Matcher m = Pattern.compile("## Configuration file.*?```toml\n(.*?)```", Pattern.DOTALL).matcher(doc);
        assertThat(m.find()).as("a ```toml block in docs/server.md's configuration section").isTrue();
        String example = m.group(1);
        assertThat(example).contains("\n[export]\n", "\n[export.disk]\n");
        for (String key : settingKeys()) {
            if (key.equals("export")) continue;
            assertThat(example).as("the example sets or shows " + key).containsPattern("(?m)^(# )?" + Pattern.quote(key) + " = ");
        }
        Run check = Run.jnbd("serve", "--config", write("example.toml", example).toString(), "--check");
        assertThat(check.exit()).as(check.toString()).isZero();
        assertThat(check.out()).contains("disk = \"file:/var/lib/vm.img,size=20G,mode=direct,scheduler=sorted,"
            + "allow=10.0.0.0/8;alice,description=VM disk, primary\"");
    }

    @Test
    void theCommandLineWinsOptionByOptionAndExportByName() throws IOException {
        Path f = write("jnbd.toml", """
            listen = ["127.0.0.1:10900", "[::1]:10900"]
            backlog = 100
            io-threads = 4
            tls-verify-peer = true
            [export]
            disk = "memory:1M"
            scratch = "memory:2M,description=from the file"
            """);
        Run r = Run.jnbd("serve", "--config", f.toString(), "--backlog", "200", "--export", "disk=memory:3M", "--check");
        assertThat(r.exit()).as(r.toString()).isZero();
        assertThat(r.out()).contains(
            "listen = [\"127.0.0.1:10900\", \"[::1]:10900\"]  # " + f + ":1\n",
            "backlog = 200  # command line\n",
            "io-threads = 4  # " + f + ":3\n",
            "tls-verify-peer = true  # " + f + ":4\n",
            "send-timeout = 60  # default\n",
            "disk = \"memory:3M\"  # command line\n",
            "scratch = \"memory:2M,description=from the file\"  # " + f + ":7\n");
    }

    @Test
    void whatCheckPrintsReadsBackAsTheSameSettings() throws IOException {
        Path f = write("jnbd.toml", """
            unix = ["/run/jnbd.sock"]
            send-buffer = "512K"
            default-export = "disk"
            [export.disk]
            file = "/srv/a,b.img"
            readonly = true
            allow = ["alice", "10.0.0.0/8"]
            description = "quotes \\" and, commas"
            """);
        Run first = Run.jnbd("serve", "--config", f.toString(), "--check");
        assertThat(first.exit()).as(first.toString()).isZero();
        Run second = Run.jnbd("serve", "--config", write("again.toml", first.out()).toString(), "--check");
        assertThat(second.exit()).as(second.toString()).isZero();
        assertThat(withoutOrigins(second.out())).isEqualTo(withoutOrigins(first.out()));
    }

    private static String withoutOrigins(String toml) {
        return toml.replaceAll("  # .*", "").replaceAll("(?m)^# .*\n", "");
    }

    @Test
    void aBadValueIsOneLineWithFileLineAndKeyExitTwoAndNothingBound() throws IOException {
        int port;
        try (ServerSocket probe = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            port = probe.getLocalPort();
        }
        Path f = write("jnbd.toml", "listen = [\"127.0.0.1:" + port + "\"]\n[export]\nm = \"memory:1M\"\n");
        Files.writeString(f, "# comment\nbacklog = \"x\"\n" + Files.readString(f));
        Run r = Run.jnbd("serve", "--config", f.toString());
        assertThat(r.exit()).as(r.toString()).isEqualTo(2);
        assertThat(r.err()).isEqualTo(f + ":2: backlog: expected a positive integer, got \"x\"\n");
        try (ServerSocket free = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
            assertThat(free.getLocalPort()).as("the file's listener was never bound").isEqualTo(port);
        }
    }

    @Test
    void eachKindOfMistakeNamesWhereItIs() throws IOException {
        assertThat(refused("backlog = 0\n")).endsWith(":1: backlog: expected a positive integer, got 0");
        assertThat(refused("port = 10809\n")).endsWith(":1: port: unknown setting (the keys are jnbd serve's long options without the dashes)");
        assertThat(refused("\n\ntls = require\n[export]\nm = \"memory:1M\"\n"))
            .endsWith(":3: tls: Unexpected 'r': not a TOML value (text needs quotes, lists brackets)");
        assertThat(refused("listen = 10809\n")).endsWith(":1: listen: expected HOST:PORT, got 10809");
        assertThat(refused("listen = [\"localhost\"]\n")).endsWith(":1: listen: expected HOST:PORT, got \"localhost\"");
        assertThat(refused("tls-verify-peer = \"yes\"\n")).endsWith(":1: tls-verify-peer: expected true or false, got \"yes\"");
        assertThat(refused("tls = \"maybe\"\n")).endsWith(":1: tls: expected off, on or require, got \"maybe\"");
        assertThat(refused("tls = \"require\"\n")).endsWith(":1: tls: --tls require needs --tls-certificates DIR or --tls-psk FILE");
        assertThat(refused("default-export = \"nope\"\n[export]\nm = \"memory:1M\"\n"))
            .endsWith(":1: default-export: 'nope' is not one of the exports (m)");
        assertThat(refused("[export]\ngood = \"memory:1M\"\nbad = \"memory:1M,mode=direct\"\n"))
            .endsWith(":3: export 'bad': mode=direct applies to files only");
        assertThat(refused("[export.t]\nmemory = \"1M\"\ncolour = \"red\"\n")).endsWith(":1: export 't': unknown option 'colour' for a memory: export");
        assertThat(refused("[export.t]\nsize = \"1M\"\n")).contains(":1: export 't': no backend: add file = \"PATH\", memory = \"SIZE\"");
        assertThat(refused("export = \"m=memory:1M\"\n")).endsWith(":1: export: expected a table of NAME = \"SPEC\" ([export])");
        Run missing = Run.jnbd("serve", "--config", dir.resolve("nope.toml").toString());
        assertThat(missing.exit()).isEqualTo(2);
        assertThat(missing.err()).isEqualTo("jnbd serve: no such config file " + dir.resolve("nope.toml") + "\n");
        Run cli = Run.jnbd("serve", "--busy-poll", "20000", "--check");
        assertThat(cli.exit()).isEqualTo(2);
        assertThat(cli.err()).isEqualTo("jnbd serve: --busy-poll: expected microseconds from 0 to 10000, got 20000\n");
    }

    /** The one line jnbd serve says about {@code toml}, after checking it exits 2 with nothing else. */
    private String refused(String toml) throws IOException {
        Path f = write("bad.toml", toml);
        Run r = Run.jnbd("serve", "--config", f.toString(), "--check");
        assertThat(r.exit()).as(r.toString()).isEqualTo(2);
        assertThat(r.out()).isEmpty();
        assertThat(r.err()).startsWith(f + ":").endsWith("\n").containsOnlyOnce("\n");
        return r.err().strip();
    }

    @Test
    void theFirstFormatIsStillRead() throws IOException {
        Path f = write("jnbd.conf", """
            # comments and blank lines are ignored

            listen = 127.0.0.1:10809
            listen=[::1]:10810
            unix = /run/jnbd.sock
            default-export = scratch
            export disk = file:/var/lib/vm.img,mode=direct
            export scratch = memory:4G,description=Scratch space, with = signs
            receive-timeout = 45
            tls-verify-peer = true
            """);
        Run r = Run.jnbd("serve", "--config", f.toString(), "--check");
        assertThat(r.exit()).as(r.toString()).isZero();
        assertThat(r.out()).contains(
            "listen = [\"127.0.0.1:10809\", \"[::1]:10810\"]  # " + f + ":3\n",
            "unix = [\"/run/jnbd.sock\"]  # " + f + ":5\n",
            "default-export = \"scratch\"",
            "receive-timeout = 45",
            "tls-verify-peer = true",
            "disk = \"file:/var/lib/vm.img,mode=direct\"  # " + f + ":7\n",
            "scratch = \"memory:4G,description=Scratch space, with = signs\"  # " + f + ":8\n");
        assertThat(refused("listen = 127.0.0.1:1\nreceive-timeout = 0\n")).endsWith(":2: receive-timeout: expected a positive integer, got 0");
    }
}
