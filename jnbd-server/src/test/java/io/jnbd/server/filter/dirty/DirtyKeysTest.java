package io.jnbd.server.filter.dirty;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.server.ExportSpec;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.FilterBackend;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The filter's keys as a spec gives them: repeated bitmaps, sizes, names, and where the bitmaps may live. */
class DirtyKeysTest {
    @TempDir
    Path dir;

    @Test
    void bitmapsRepeatAndAreMadeInOrder() throws Exception {
        ExportSpec s = ExportSpec.parse("d", "memory:1M,filter=dirty,dirty-bitmap=a,dirty-bitmap=b.1,dirty-dir=" + dir);
        assertThat(s.describeStack()).startsWith("dirty(a, b.1 at 65536 bytes a bit in " + dir + ") -> memory:1M");
        assertThat(ExportSpec.parse("d", s.text())).as("the spec written back reads the same").isEqualTo(s);
        ExportSpec table = ExportSpec.of("d", "memory", "1M", java.util.List.of(java.util.Map.entry("filter", "dirty"),
            java.util.Map.entry("dirty-bitmap", "a"), java.util.Map.entry("dirty-bitmap", "b.1"), java.util.Map.entry("dirty-dir", dir.toString())), "");
        assertThat(table).as("a config file's table, the bitmaps a list").isEqualTo(s);
        try (Backend b = s.open()) {
            assertThat(FilterBackend.find(b, DirtyBitmaps.class).list()).extracting(DirtyBitmaps.Info::name).containsExactly("a", "b.1");
        }
    }

    @Test
    void badKeysAreOneLineNamingTheKey() {
        assertThatThrownBy(() -> ExportSpec.parse("d", "memory:1M,filter=dirty,dirty-dir=/x,dirty-granularity=3000"))
            .hasMessage("export 'd': dirty-granularity=3000 must be a power of two from 512 to 1G");
        assertThatThrownBy(() -> ExportSpec.parse("d", "memory:1M,filter=dirty,dirty-dir=/x,dirty-granularity=256"))
            .hasMessageContaining("power of two from 512");
        assertThatThrownBy(() -> ExportSpec.parse("d", "memory:1M,filter=dirty,dirty-dir=/x,dirty-granularity=2G"))
            .hasMessageContaining("power of two from 512 to 1G");
        assertThatThrownBy(() -> ExportSpec.parse("d", "memory:1M,filter=dirty,dirty-dir=/x,dirty-bitmap=../etc"))
            .hasMessage("export 'd': dirty-bitmap=../etc: bitmap name '../etc' is not 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')");
        assertThatThrownBy(() -> ExportSpec.parse("d", "memory:1M,filter=dirty,dirty-dir=/x,dirty-bitmap=.hidden")).hasMessageContaining("'.hidden'");
        assertThatThrownBy(() -> ExportSpec.parse("d", "memory:1M,filter=dirty,dirty-dir=/x,dirty-bitmap=" + "x".repeat(65))).hasMessageContaining("1 to 64");
        assertThatThrownBy(() -> ExportSpec.parse("d", "memory:1M,filter=dirty,dirty-dir=/x,dirty-bitmap=")).hasMessageContaining("dirty-bitmap= needs a value");
        assertThatThrownBy(() -> ExportSpec.parse("d", "memory:1M,dirty-bitmap=a")).hasMessageContaining("add filter=dirty");
    }

    @Test
    void withoutAnImageFileTheDirectoryMustBeGiven() {
        assertThatThrownBy(() -> ExportSpec.parse("d", "memory:1M,filter=dirty,dirty-bitmap=a"))
            .hasMessage("export 'd': filter=dirty needs dirty-dir=DIR, where its bitmaps are kept (only over a file: export do they go beside the image by default)");
        ExportSpec s = ExportSpec.parse("d", "file:" + dir.resolve("vm.img") + ",size=1M,filter=dirty,dirty-bitmap=a");
        assertThat(s.describeStack()).startsWith("dirty(a at 65536 bytes a bit, beside the image) -> file:");
    }
}
