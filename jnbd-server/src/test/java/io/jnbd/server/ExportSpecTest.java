package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend.Capability;
import io.jnbd.server.backend.FileBackend;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** {@code --export NAME=SPEC}: what good specs mean, and the one clear line a bad spec gets. */
class ExportSpecTest {
    @TempDir
    Path dir;

    @Test
    void fileSpecWithEveryOption() {
        ExportSpec s = ExportSpec.parse("disk=file:/var/lib/vm.img,size=2G,mode=direct,readonly,split=2M,chunk=512K,streams=8");
        assertThat(s.name()).isEqualTo("disk");
        assertThat(s.kind()).isEqualTo("file");
        assertThat(s.target()).isEqualTo("/var/lib/vm.img");
        assertThat(s.options().size("size", -1)).isEqualTo(2L << 30);
        assertThat(s.options().asMap()).containsEntry("mode", "direct");
        assertThat(s.readOnly()).isTrue();
        assertThat(s.description()).isEmpty();
        assertThat(s.tuning().splitThreshold()).isEqualTo(2 << 20);
        assertThat(s.tuning().chunkSize()).isEqualTo(512 << 10);
        assertThat(s.tuning().streams()).isEqualTo(8);
    }

    @Test
    void aKindFromAnotherModulePlugsInThroughItsFactory() throws Exception {
        // PatternBackendFactory is registered only in the tests' META-INF/services.
        ExportSpec s = ExportSpec.parse("p=pattern:1M,byte=7,split=2M,description=sevens");
        assertThat(s.kind()).isEqualTo("pattern");
        assertThat(s.tuning().streams()).as("its declared traits choose the defaults").isEqualTo(4);
        Export e = s.openExport();
        java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(16);
        e.backend().read(0, b);
        assertThat(b.array()).containsOnly((byte) 7);
        assertThat(e.description()).isEqualTo("sevens");
        assertThatThrownBy(() -> ExportSpec.parse("p=pattern:1M,byte=300"))
            .hasMessage("export 'p': byte must be a whole number from 0 to 255, not '300'");
        assertThatThrownBy(() -> ExportSpec.parse("p=pattern:1M,mode=direct"))
            .hasMessage("export 'p': unknown option 'mode' for a pattern: export");
        assertThatThrownBy(() -> ExportSpec.parse("d=disk:/x"))
            .hasMessage("export 'd': unknown backend 'disk' (use file:, memory: or pattern:)");
    }

    @Test
    void aReadOnlyFilterKeepsTheTraitsOfWhatItWraps() throws Exception {
        try (var b = ExportSpec.parse("r=file:" + dir.resolve("r.img") + ",size=1M").open();
             var ro = ExportSpec.parse("r=file:" + dir.resolve("r.img") + ",readonly").open();
             var direct = ExportSpec.parse("r=file:" + dir.resolve("r.img") + ",mode=direct,readonly").open()) {
            assertThat(ro.traits()).isEqualTo(b.traits()).containsExactlyInAnyOrder(
                io.jnbd.server.backend.Backend.Trait.ZERO_COPY, io.jnbd.server.backend.Backend.Trait.CACHED_READS);
            assertThat(direct.traits()).containsExactly(io.jnbd.server.backend.Backend.Trait.DIRECT_IO);
        }
    }

    @Test
    void defaults() {
        ExportSpec s = ExportSpec.parse("d=file:x.img");
        assertThat(s.options().asMap()).isEmpty();
        assertThat(s.readOnly()).isFalse();
        assertThat(s.tuning()).isEqualTo(ExportTuning.DEFAULT);
    }

    @Test
    void allowListsAddUpAndReachTheExport() throws Exception {
        ExportSpec s = ExportSpec.parse("m=memory:1M,allow=alice;10.0.0.0/8,readonly,allow=fd00::/8,description=a, b");
        assertThat(s.access().toString()).isEqualTo("alice;10.0.0.0/8;fd00::/8");
        assertThat(s.description()).isEqualTo("a, b");
        Export e = s.openExport();
        assertThat(e.access()).isSameAs(s.access());
        assertThat(e.access().allows(new Client(java.net.InetAddress.ofLiteral("10.1.1.1"), java.util.List.of()))).isTrue();
        assertThat(ExportSpec.parse("m=memory:1M").access()).isSameAs(AllowList.ANYONE);
        assertThatThrownBy(() -> ExportSpec.parse("m=memory:1M,allow=10.0.0.0/40"))
            .hasMessageStartingWith("export 'm': allow entry '10.0.0.0/40'");
        assertThatThrownBy(() -> ExportSpec.parse("m=memory:1M,allow")).hasMessageContaining("allow= needs");
    }

    @Test
    void memorySpec() {
        ExportSpec s = ExportSpec.parse("scratch=memory:4G");
        assertThat(s.kind()).isEqualTo("memory");
        assertThat(s.target()).isEqualTo("4G");
        // memory reads are copies, not device waits: they split into more streams unless told otherwise
        assertThat(s.tuning()).isEqualTo(ExportTuning.DEFAULT.withStreams(4));
        assertThat(ExportSpec.parse("m=memory:1M,streams=2").tuning().streams()).isEqualTo(2);
        assertThat(ExportSpec.parse("m", "MEMORY:64k,ro").readOnly()).isTrue();
        assertThat(ExportSpec.parse("m", "memory:1M,readonly=false").readOnly()).isFalse();
    }

    @Test
    void descriptionRunsToTheEndAndMayHoldCommas() {
        ExportSpec s = ExportSpec.parse("d=memory:1M,readonly,description=Scratch space, for tests, mode=direct");
        assertThat(s.description()).isEqualTo("Scratch space, for tests, mode=direct");
        assertThat(s.readOnly()).isTrue();
        assertThat(s.options().asMap()).as("mode=direct is part of the description").isEmpty();
    }

    @ParameterizedTest
    @CsvSource({
        "4096, 4096", "64K, 65536", "64k, 65536", "1M, 1048576", "1G, 1073741824", "1GiB, 1073741824",
        "1GB, 1073741824", "2T, 2199023255552", "1P, 1125899906842624", "0, 0", "' 8M ', 8388608"
    })
    void sizes(String text, long bytes) {
        assertThat(ExportSpec.parseSize(text)).isEqualTo(bytes);
    }

    @ParameterizedTest
    @CsvSource(value = {"abc", "-1", "1.5G", "8E", "G", "K", "KiB", "iB", "' '", "9999999999T", "99999999999999999999", "1GG"},
        emptyValue = "")
    void badSizesAreOneClearLine(String text) {
        assertThatThrownBy(() -> ExportSpec.parseSize(text))
            .isExactlyInstanceOf(IllegalArgumentException.class)
            .hasMessageContaining("not a size");
    }

    @Test
    void missingSize() {
        assertThatThrownBy(() -> ExportSpec.parseSize("")).isInstanceOf(IllegalArgumentException.class).hasMessage("missing size");
        assertThatThrownBy(() -> ExportSpec.parseSize(null)).isInstanceOf(IllegalArgumentException.class);
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "noequals                            | is not NAME=file:PATH or NAME=memory:SIZE",
        "=file:/x                            | is not NAME=file:PATH or NAME=memory:SIZE",
        "a:b=memory:1M                       | is not NAME=file:PATH or NAME=memory:SIZE",
        "d=/plain/path                       | export 'd': '/plain/path' does not start with file:, memory: or pattern:",
        "d=disk:/x                           | export 'd': unknown backend 'disk' (use file:, memory: or pattern:)",
        "d=file:                             | export 'd': file: needs a path",
        "d=file:/x,mode=fast                 | export 'd': mode must be cached or direct, not 'fast'",
        "d=file:/x,mode=                     | export 'd': mode= needs a value",
        "d=file:/x,size                      | export 'd': size= needs a value",
        "d=file:/x,bogus=1                   | export 'd': unknown option 'bogus' for a file: export",
        "d=file:/x,                          | export 'd': unknown option '' for a file: export",
        "d=memory:1G,mode=direct             | export 'd': mode=direct applies to files only",
        "d=memory:1G,size=2G                 | export 'd': give a memory export's size as memory:SIZE",
        "d=memory:0                          | export 'd': size must be positive",
        "d=file:/x,chunk=1000                | export 'd': chunk size must be a power of two of at least 4K",
        "d=file:/x,chunk=2K                  | export 'd': chunk size must be a power of two of at least 4K",
        "d=file:/x,streams=0                 | export 'd': streams must be 1 to 64",
        "d=file:/x,streams=65                | export 'd': streams must be 1 to 64",
        "d=file:/x,split=64K,chunk=256K      | export 'd': split threshold must be at least the chunk size",
        "d=file:/x,split=8G                  | export 'd': split=8G is too large",
        "d=file:/x,scheduler=elevator        | export 'd': scheduler must be none or sorted, not 'elevator'",
    })
    void badSpecsGetOneClearLine(String spec, String message) {
        assertThatThrownBy(() -> ExportSpec.parse(spec))
            .isExactlyInstanceOf(IllegalArgumentException.class)
            .hasMessage(message.replace("noequals", spec).replace("=file:/x", spec).replace("a:b=memory:1M", spec).contains("is not NAME")
                ? "export '" + spec + "' is not NAME=file:PATH or NAME=memory:SIZE" : message);
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {"d=memory:lots | lots", "d=memory: | size", "d=file:/x,size=big | big", "d=memory:iB | iB"})
    void badSizesInASpecNameTheExport(String spec, String fragment) {
        assertThatThrownBy(() -> ExportSpec.parse(spec))
            .isExactlyInstanceOf(IllegalArgumentException.class)
            .hasMessageStartingWith("export 'd': ")
            .hasMessageContaining(fragment);
    }

    @Test
    void exportNamesAreBounded() {
        assertThatThrownBy(() -> ExportSpec.parse("", "memory:1M")).hasMessage("export name must be 1 to 4096 bytes");
        assertThatThrownBy(() -> ExportSpec.parse("x".repeat(4097), "memory:1M")).hasMessage("export name must be 1 to 4096 bytes");
        assertThat(ExportSpec.parse("x".repeat(4096), "memory:1M").name()).hasSize(4096);
    }

    @Test
    void openingCreatesAndGrowsFilesSparsely() throws Exception {
        Path f = dir.resolve("sub/dir/new.img");
        Export e = ExportSpec.parse("n", "file:" + f + ",size=64M,description=new disk").openExport();
        try {
            assertThat(Files.size(f)).isEqualTo(64 << 20);
            assertThat(ServerFixture.allocatedBlocks(f)).isLessThan(1024);
            assertThat(e.backend().size()).isEqualTo(64 << 20);
            assertThat(e.description()).isEqualTo("new disk");
            assertThat(e.transmissionFlags(false) & Nbd.FLAG_READ_ONLY).isZero();
        } finally {
            e.backend().close();
        }
        // Reopening with a larger size grows it; a smaller size never shrinks it.
        ExportSpec.parse("n", "file:" + f + ",size=128M").open().close();
        assertThat(Files.size(f)).isEqualTo(128 << 20);
        ExportSpec.parse("n", "file:" + f + ",size=1M").open().close();
        assertThat(Files.size(f)).isEqualTo(128 << 20);
    }

    @Test
    void readOnlyExportsHideWriteCapabilities() throws Exception {
        Path f = dir.resolve("ro.img");
        Files.write(f, new byte[8192]);
        try (var b = ExportSpec.parse("r", "file:" + f + ",readonly").open()) {
            assertThat(b.can(Capability.WRITE)).isFalse();
            assertThat(b.can(Capability.TRIM)).isFalse();
            assertThat(b.size()).isEqualTo(8192);
        }
        Export e = ExportSpec.parse("m", "memory:1M,readonly").openExport();
        assertThat(e.transmissionFlags(true) & Nbd.FLAG_READ_ONLY).isNotZero();
        assertThat(e.transmissionFlags(true) & (Nbd.FLAG_SEND_TRIM | Nbd.FLAG_SEND_WRITE_ZEROES)).isZero();
    }

    @Test
    void missingFileWithoutSizeIsAClearError() {
        Path f = dir.resolve("absent.img");
        assertThatThrownBy(() -> ExportSpec.parse("a", "file:" + f).open())
            .isInstanceOf(NoSuchFileException.class)
            .hasMessageContaining(f.toString())
            .hasMessageContaining("size=");
        assertThatThrownBy(() -> ExportSpec.parse("a", "file:" + f + ",size=1M,readonly").open())
            .isInstanceOf(NoSuchFileException.class)
            .hasMessageContaining("read-only");
        assertThat(Files.exists(f)).isFalse();
    }

    @Test
    void directModeAdvertisesItsAlignment() throws IOException {
        Path f = dir.resolve("direct.img");
        try (var b = ExportSpec.parse("d", "file:" + f + ",size=1M,mode=direct").open()) {
            assertThat(b.blockSizes().minimum()).isEqualTo(512);
            assertThat(b.blockSizes().preferred()).isGreaterThanOrEqualTo(4096);
        }
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "file:/var/lib/vm.img",
        "file:/var/lib/vm.img,size=2G,mode=direct,readonly,split=2M,chunk=256K,streams=8,scheduler=sorted",
        "memory:4G,allow=alice;10.0.0.0/8,description=a, b",
        "memory:4G,allow=alice;bob,readonly-for=bob;10.0.0.0/8",
        "memory:1M,readonly-for=192.0.2.0/24",
        "pattern:1M,byte=7,streams=2"})
    void aSpecWrittenOutReadsBackTheSame(String spec) {
        ExportSpec s = ExportSpec.parse("x", spec);
        assertThat(s.text()).isEqualTo(spec);
        assertThat(ExportSpec.parse("x", s.text())).isEqualTo(s);
    }

    @Test
    void theSameBackendIsKindTargetOptionsAndReadOnly() {
        ExportSpec s = ExportSpec.parse("d=file:/x,size=1G");
        assertThat(s.sameBackend(ExportSpec.parse("d=file:/x,size=1G,streams=8,allow=alice,description=d"))).isTrue();
        assertThat(s.sameBackend(ExportSpec.parse("d=file:/x,size=2G"))).isFalse();
        assertThat(s.sameBackend(ExportSpec.parse("d=file:/x,size=1G,readonly"))).isFalse();
        assertThat(s.sameBackend(ExportSpec.parse("d=file:/y,size=1G"))).isFalse();
    }

    @Test
    void aSpecInPartsKeepsCommasInItsTarget() {
        ExportSpec s = ExportSpec.of("d", "file", "/srv/a,b.img", List.of(java.util.Map.entry("mode", "direct"),
            new java.util.AbstractMap.SimpleEntry<>("readonly", null)), "x, y");
        assertThat(s.target()).isEqualTo("/srv/a,b.img");
        assertThat(s.readOnly()).isTrue();
        assertThat(s.description()).isEqualTo("x, y");
        assertThatThrownBy(() -> ExportSpec.of("d", "file", "/x", List.of(java.util.Map.entry("colour", "red")), ""))
            .hasMessage("export 'd': unknown option 'colour' for a file: export");
    }
}
