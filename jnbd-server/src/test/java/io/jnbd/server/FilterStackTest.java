package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.protocol.Nbd;
import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.DocumentBackend;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.backend.NbdErrorException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * How an export spec stacks filters: {@code filter=NAME} outermost first, each key going to the filter that takes
 * it, readonly as the outermost filter; the messages for what is wrong; the round trip through {@link ExportSpec#text};
 * the traits that leave the stack; and a reload that changes only the filters.
 */
class FilterStackTest {
    @TempDir
    Path dir;

    private static List<String> names(ExportSpec s) {
        return s.filters().filters().stream().map(FilterStack.Filter::name).toList();
    }

    @Test
    void filtersStackOutermostFirstAndEachKeyGoesToItsFilter() {
        ExportSpec s = ExportSpec.parse("d=memory:1M,filter=delay,delay-read=5ms,filter=error,error=EIO,error-rate=10%");
        assertThat(names(s)).containsExactly("delay", "error");
        assertThat(s.filters().filters().get(0).options().asMap()).isEqualTo(Map.of("delay-read", "5ms"));
        assertThat(s.filters().filters().get(1).options().asMap()).isEqualTo(Map.of("error", "EIO", "error-rate", "10%"));
        assertThat(s.describeStack()).isEqualTo("delay(read 5ms) -> error(EIO 10%) -> memory:1M");

        ExportSpec keysFirst = ExportSpec.parse("d=memory:1M,error-rate=10%,delay-read=5ms,error=EIO,filter=delay,filter=error");
        assertThat(keysFirst.filters()).as("a key belongs to its filter wherever it stands").isEqualTo(s.filters());
        assertThat(names(ExportSpec.parse("d=memory:1M,filter=error,filter=delay"))).containsExactly("error", "delay");
    }

    @Test
    void readonlyIsTheReadOnlyFilterOutermost() {
        ExportSpec shortForm = ExportSpec.parse("d=memory:1M,filter=error,readonly");
        assertThat(names(shortForm)).containsExactly("readonly", "error");
        assertThat(shortForm.readOnly()).isTrue();
        assertThat(shortForm).isEqualTo(ExportSpec.parse("d=memory:1M,filter=readonly,filter=error"));
        ExportSpec inner = ExportSpec.parse("d=memory:1M,filter=error,filter=readonly");
        assertThat(names(inner)).containsExactly("error", "readonly");
        assertThat(inner.readOnly()).isTrue();
        assertThat(ExportSpec.parse("d=memory:1M,readonly=false").filters().isEmpty()).isTrue();
    }

    @Test
    void aMistakeIsOneLineNamingTheExportAndTheKey() {
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,filter=nope"))
            .hasMessage("export 'd': filter=nope: no such filter (use cache, cow, delay, dirty, error, probe, rate or readonly)");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,filter="))
            .hasMessage("export 'd': filter= needs the name of a filter (cache, cow, delay, dirty, error, probe, rate or readonly)");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,filter=delay,delay-reed=5ms"))
            .hasMessage("export 'd': unknown option 'delay-reed' for a memory: export or its filters (delay)");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,delay-read=5ms"))
            .hasMessage("export 'd': delay-read= is a key of the delay filter: add filter=delay");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,filter=delay,delay-read=fast"))
            .hasMessage("export 'd': delay-read=fast is not a delay (seconds, or with a unit: 2, 1.5s, 10ms, 500us, 1000ns)");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,filter=error,error-rate=2"))
            .hasMessage("export 'd': error-rate=2 is not a rate from 0 to 1 (10%, 0.1 or 1:10)");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,filter=rate,rate=0"))
            .hasMessage("export 'd': rate=0: the rate must be above 0 (leave rate= out for no limit)");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,filter=rate,connection-rate=1M,burstiness=0"))
            .hasMessage("export 'd': burstiness=0 is not a number of seconds above 0 and up to 3600 (default 2.0)");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,filter=delay,filter=error,filter=delay"))
            .hasMessage("export 'd': filter=delay is named twice; a stack holds each filter once");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,readonly,filter=readonly"))
            .hasMessage("export 'd': filter=readonly is named twice (readonly is short for filter=readonly)");
    }

    @Test
    void aFilterThatCannotStandOverWhatIsBehindItIsRefused() throws IOException {
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,filter=probe,probe-needs-write=true,filter=readonly"))
            .hasMessage("export 'd': filter=probe: it writes to what is behind it, which is read-only");
        assertThatThrownBy(() -> ExportSpec.parse("d=memory:1M,readonly,filter=probe,probe-needs-write=true"))
            .as("the backend of a read-only stack opens read-only").hasMessageStartingWith("export 'd': filter=probe: it writes");
        ExportSpec fine = ExportSpec.parse("d=memory:1M,filter=probe,probe-needs-write=true");
        try (Backend readOnly = new DocumentBackend(4096, () -> new byte[] {1}, "a document")) {
            assertThatThrownBy(() -> fine.wrap(readOnly)).as("checked again against what the backend really offers")
                .isInstanceOf(IOException.class)
                .hasMessage("filter=probe cannot stand in front of a document: it writes to what is behind it, which is read-only");
        }
    }

    @Test
    void onlyTraitsEveryFilterKeepsLeaveTheStack() throws IOException {
        Path img = dir.resolve("d.img");
        ExportSpec file = ExportSpec.parse("d", "file:" + img + ",size=1M");
        assertThat(file.traits()).contains(Backend.Trait.ZERO_COPY);
        assertThat(ExportSpec.parse("d", "file:" + img + ",size=1M,readonly").traits()).isEqualTo(file.traits());
        assertThat(ExportSpec.parse("d", "file:" + img + ",size=1M,filter=delay,delay-read=1ms").traits()).doesNotContain(Backend.Trait.ZERO_COPY);
        assertThat(ExportSpec.parse("d", "file:" + img + ",size=1M,filter=delay,delay-write=1ms").traits())
            .as("a write delayed on the reader would stall the connection").doesNotContain(Backend.Trait.ZERO_COPY);
        assertThat(ExportSpec.parse("d", "memory:1M,filter=delay,delay-trim=1ms").traits()).doesNotContain(Backend.Trait.NEVER_BLOCKS);
        assertThat(ExportSpec.parse("d", "file:" + img + ",size=1M,filter=error,error-pread-rate=1").traits()).doesNotContain(Backend.Trait.ZERO_COPY);
        assertThat(ExportSpec.parse("d", "memory:1M,filter=error,error-rate=1,error-file=" + img).traits())
            .as("it looks for a file on every call").doesNotContain(Backend.Trait.NEVER_BLOCKS);
        // Filters configured to leave a path alone keep the trait that opens it: sendfile skips only pass-through code.
        assertThat(ExportSpec.parse("d", "file:" + img + ",size=1M,filter=delay,filter=error,error-rate=0").traits())
            .isEqualTo(file.traits());
        assertThat(ExportSpec.parse("d", "file:" + img + ",size=1M,filter=error,error-pwrite-rate=1").traits()).contains(Backend.Trait.ZERO_COPY);
        assertThat(ExportSpec.parse("d", "memory:1M,filter=error,error-rate=10%").traits()).contains(Backend.Trait.NEVER_BLOCKS);
        file.open().close();
        try (Backend chain = ExportSpec.parse("d", "file:" + img + ",readonly,filter=error,error-rate=1").open()) {
            assertThat(chain.traits()).isEqualTo(ExportSpec.parse("d", "file:" + img + ",readonly,filter=error,error-rate=1").traits())
                .doesNotContain(Backend.Trait.ZERO_COPY);
            assertThat(chain.can(Backend.Capability.WRITE)).isFalse();
        }
    }

    @Test
    void specsWithFiltersReadBackFromTheirText() {
        for (String spec : List.of(
            "memory:1M,filter=delay,delay-read=5ms,filter=error,error=EIO,error-rate=10%",
            "memory:1M,readonly,filter=delay,rdelay=1",
            "memory:1M,filter=error,error-pread-rate=1,error-offset=4096,error-length=512,filter=readonly,streams=8",
            "memory:1M,filter=error,error-rate=100%,error-file=/tmp/x,filter=delay,delay-fast-zero=false,allow=alice")) {
            ExportSpec s = ExportSpec.parse("x", spec);
            assertThat(s.text()).isEqualTo(spec);
            assertThat(ExportSpec.parse("x", s.text())).isEqualTo(s);
            assertThat(ExportSpec.of("x", s.kind(), s.target(), s.parts(), s.description())).isEqualTo(s);
        }
    }

    @Test
    void aReloadThatChangesOnlyTheFiltersKeepsTheBackendAndBuildsANewChain() throws Exception {
        ExportSet first = ExportSet.open(List.of(ExportSpec.parse("m=memory:1M,filter=delay")), null);
        Backend before = first.exports().find("m").backend();
        before.write(0, ByteBuffer.wrap(new byte[] {9}), false);

        ExportSet second = ExportSet.open(List.of(ExportSpec.parse("m=memory:1M,filter=error,error-pread-rate=1,error=ENOMEM")), null, first);
        Backend after = second.exports().find("m").backend();
        assertThat(after).isNotSameAs(before);
        assertThatThrownBy(() -> after.read(0, ByteBuffer.allocate(1)))
            .isInstanceOfSatisfying(NbdErrorException.class, e -> assertThat(e.error()).isEqualTo(Nbd.ENOMEM));
        ByteBuffer b = ByteBuffer.allocate(1);
        before.read(0, b);
        assertThat(b.get(0)).as("the old chain still serves its connections, over the same data").isEqualTo((byte) 9);
        ExportSet.Changes changes = second.changesFrom(first);
        assertThat(changes.changed()).containsExactly("m");
        assertThat(changes.reopened()).as("the backend and its data were kept").isEmpty();

        ExportSet third = ExportSet.open(List.of(ExportSpec.parse("m=memory:1M")), null, second);
        ByteBuffer c = ByteBuffer.allocate(1);
        third.exports().find("m").backend().read(0, c);
        assertThat(c.get(0)).isEqualTo((byte) 9);
        assertThat(FilterBackend.find(third.exports().find("m").backend(), MemoryBackend.class))
            .isSameAs(FilterBackend.find(before, MemoryBackend.class));

        ExportSet fourth = ExportSet.open(List.of(ExportSpec.parse("m=memory:1M,readonly")), null, third);
        assertThat(fourth.changesFrom(third).reopened()).as("read-only opens the backend anew").containsExactly("m");
    }

    /**
     * The registry closes the chain a reload replaced once its last connection is gone: that must not close the
     * backend the new chain stands on, and the backend closes once, with the last chain.
     */
    @Test
    void retiringTheOldChainLeavesTheBackendToTheNewOne() throws Exception {
        ExportSet first = ExportSet.open(List.of(ExportSpec.parse("m=memory:1M")), null);
        first.exports().find("m").backend().write(0, ByteBuffer.wrap(new byte[] {4, 2}), false);
        ReloadableExports registry = new ReloadableExports(first.exports(), java.time.Duration.ZERO);
        for (String spec : List.of("m=memory:1M,filter=delay", "m=memory:1M,filter=error,error-rate=0", "m=memory:1M")) {
            ExportSet before = first;
            first = ExportSet.open(List.of(ExportSpec.parse(spec)), null, before);
            registry.replace(first.exports());
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (registry.retiredCount() > 0 && System.nanoTime() < deadline) Thread.sleep(5);
            assertThat(registry.retiredCount()).as("the old chain of %s was closed", spec).isZero();
            ByteBuffer b = ByteBuffer.allocate(2);
            first.exports().find("m").backend().read(0, b);
            assertThat(b.array()).as("data behind %s", spec).containsExactly(4, 2);
        }
        MemoryBackend memory = FilterBackend.find(first.exports().find("m").backend(), MemoryBackend.class);
        for (Export e : registry.stop()) e.backend().close();
        assertThat(memory.allocatedBytes()).as("closed with the last chain").isZero();
    }
}
