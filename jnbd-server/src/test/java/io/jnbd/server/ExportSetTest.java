package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** What a reload opens: only the exports whose backend changed; a failure leaves the running set as it was. */
class ExportSetTest {
    @TempDir
    Path dir;

    @Test
    void anExportWithTheSameBackendKeepsItAndItsData() throws Exception {
        ExportSet first = ExportSet.open(List.of(ExportSpec.parse("m=memory:1M"), ExportSpec.parse("f=file:" + dir.resolve("f.img") + ",size=1M")), null);
        first.exports().find("m").backend().write(0, ByteBuffer.wrap(new byte[] {9}), false);

        ExportSet second = ExportSet.open(List.of(
            ExportSpec.parse("m=memory:1M,streams=8,allow=10.0.0.0/8,description=now described"),
            ExportSpec.parse("f=file:" + dir.resolve("f.img") + ",size=1M,mode=direct"),
            ExportSpec.parse("n=memory:1M")), "n", first);

        assertThat(second.exports().find("m").backend()).isSameAs(first.exports().find("m").backend());
        assertThat(second.exports().find("m").description()).isEqualTo("now described");
        ByteBuffer b = ByteBuffer.allocate(1);
        second.exports().find("m").backend().read(0, b);
        assertThat(b.get(0)).isEqualTo((byte) 9);
        assertThat(second.exports().find("f").backend()).as("mode= opens the file anew").isNotSameAs(first.exports().find("f").backend());
        ExportSet.Changes changes = second.changesFrom(first);
        assertThat(changes.added()).containsExactly("n");
        assertThat(changes.removed()).isEmpty();
        assertThat(changes.changed()).containsExactly("m", "f");
        assertThat(changes.reopened()).containsExactly("f");
        first.exports().find("f").backend().close();
        for (Export e : second.exports().all()) e.backend().close();
    }

    @Test
    void aFailureClosesWhatItOpenedAndLeavesThePreviousSetAlone() throws Exception {
        ExportSet first = ExportSet.open(List.of(ExportSpec.parse("m=memory:1M")), null);
        assertThatThrownBy(() -> ExportSet.open(List.of(ExportSpec.parse("m=memory:1M"),
                ExportSpec.parse("gone=file:" + dir.resolve("no/such/dir/x.img"))), null, first))
            .isInstanceOf(ExportSet.OpenFailed.class)
            .hasMessageStartingWith("export 'gone': cannot open " + dir.resolve("no/such/dir/x.img"));
        assertThatThrownBy(() -> ExportSet.open(List.of(ExportSpec.parse("m=memory:1M")), "other", first))
            .hasMessage("default export 'other' is not one of the exports");
        assertThatThrownBy(() -> ExportSet.open(List.of(ExportSpec.parse("m=memory:1M"), ExportSpec.parse("m=memory:2M")), null))
            .hasMessage("export 'm' is named twice");
        ByteBuffer b = ByteBuffer.allocate(1);
        first.exports().find("m").backend().read(0, b);
        assertThat(first.exports().find("m").backend().size()).isEqualTo(1 << 20);
    }
}
