package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The {@code --config} file: every setting, comments, and errors that name the file and line. */
class ConfigFileTest {
    @TempDir
    Path dir;

    private Path write(String text) throws IOException {
        Path p = dir.resolve("jnbd.conf");
        Files.writeString(p, text);
        return p;
    }

    @Test
    void everySetting() throws IOException {
        ConfigFile c = ConfigFile.read(write("""
            # comments and blank lines are ignored

              # indented comment
            listen = 127.0.0.1:10809
            listen=[::1]:10810
            unix = /run/jnbd.sock
            default-export = scratch
            export disk = file:/var/lib/vm.img,mode=direct
            export scratch = memory:4G,description=Scratch space, with = signs
            receive-timeout = 45
            backlog = 2048
            """));
        assertThat(c.receiveTimeout()).isEqualTo(45);
        assertThat(c.backlog()).isEqualTo(2048);
        assertThat(c.listen()).containsExactly("127.0.0.1:10809", "[::1]:10810");
        assertThat(c.unix()).containsExactly("/run/jnbd.sock");
        assertThat(c.defaultExport()).isEqualTo("scratch");
        assertThat(c.exports()).extracting(ExportSpec::name).containsExactly("disk", "scratch");
        assertThat(c.exports().get(0).target()).isEqualTo("/var/lib/vm.img");
        assertThat(c.exports().get(1).target()).isEqualTo("4G");
        assertThat(c.exports().get(1).description()).isEqualTo("Scratch space, with = signs");
    }

    @Test
    void emptyFile() throws IOException {
        ConfigFile c = ConfigFile.read(write(""));
        assertThat(c.exports()).isEmpty();
        assertThat(c.listen()).isEmpty();
        assertThat(c.defaultExport()).isNull();
        assertThat(c.receiveTimeout()).as("not set: the command line or the default decides").isNull();
        assertThat(c.backlog()).isNull();
    }

    @Test
    void settingsThatMustBePositiveWholeNumbersNameFileLineAndKey() throws IOException {
        Path p = write("listen = 127.0.0.1:1\nreceive-timeout = 0\n");
        assertThatThrownBy(() -> ConfigFile.read(p)).isInstanceOf(IllegalArgumentException.class)
            .hasMessage(p + ":2: receive-timeout must be a whole number of at least 1, not '0'");
        Path q = write("backlog = lots\n");
        assertThatThrownBy(() -> ConfigFile.read(q)).isInstanceOf(IllegalArgumentException.class)
            .hasMessage(q + ":1: backlog must be a whole number of at least 1, not 'lots'");
    }

    @Test
    void tlsSettings() throws IOException {
        ConfigFile c = ConfigFile.read(write("""
            tls = require
            tls-certificates = /etc/pki/jnbd
            tls-verify-peer = true
            tls-psk = keys.psk
            """));
        assertThat(c.tls()).isEqualTo(ServerTls.Mode.REQUIRE);
        assertThat(c.tlsCertificates()).isEqualTo(Path.of("/etc/pki/jnbd"));
        assertThat(c.tlsVerifyPeer()).isTrue();
        assertThat(c.tlsPsk()).isEqualTo(Path.of("keys.psk"));
        ConfigFile none = ConfigFile.read(write("listen = 127.0.0.1:1\n"));
        assertThat(none.tls()).as("not set: the command line or the default decides").isNull();
        assertThat(none.tlsVerifyPeer()).isNull();
        Path p = write("tls = maybe\n");
        assertThatThrownBy(() -> ConfigFile.read(p)).hasMessage(p + ":1: tls must be off, on or require, not 'maybe'");
        Path q = write("tls = on\ntls-verify-peer = yes\n");
        assertThatThrownBy(() -> ConfigFile.read(q)).hasMessage(q + ":2: tls-verify-peer must be true or false, not 'yes'");
    }

    @Test
    void lineWithoutEqualsNamesFileAndLine() throws IOException {
        Path p = write("# ok\nlisten = 127.0.0.1:1\nthis is not a setting\n");
        assertThatThrownBy(() -> ConfigFile.read(p)).isInstanceOf(IllegalArgumentException.class)
            .hasMessage(p + ":3: expected KEY = VALUE");
    }

    @Test
    void unknownSettingNamesFileAndLine() throws IOException {
        Path p = write("listen = 127.0.0.1:1\nport = 10809\n");
        assertThatThrownBy(() -> ConfigFile.read(p)).isInstanceOf(IllegalArgumentException.class)
            .hasMessage(p + ":2: unknown setting 'port'");
    }

    @Test
    void badExportNamesFileLineAndExport() throws IOException {
        Path p = write("export good = memory:1M\nexport bad = memory:1M,mode=direct\n");
        assertThatThrownBy(() -> ConfigFile.read(p)).isInstanceOf(IllegalArgumentException.class)
            .hasMessage(p + ":2: export 'bad': mode=direct applies to files only");
    }

    @Test
    void exportWithoutANameIsAnError() throws IOException {
        Path p = write("export  = memory:1M\n");
        assertThatThrownBy(() -> ConfigFile.read(p)).isInstanceOf(IllegalArgumentException.class)
            .hasMessageStartingWith(p + ":1: ");
    }

    @Test
    void missingFile() {
        assertThatThrownBy(() -> ConfigFile.read(dir.resolve("nope.conf"))).isInstanceOf(NoSuchFileException.class);
    }
}
