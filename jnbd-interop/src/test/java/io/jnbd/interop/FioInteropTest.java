package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * fio's nbd engine (libnbd, many requests in flight) with crc32c verification over mixed sizes
 * and depths, against a page-cache export and an O_DIRECT export of files.
 */
@Timeout(300)
class FioInteropTest {

    private static final Duration T = Duration.ofSeconds(240);

    @TempDir
    static Path dir;
    static JnbdServer server;

    @BeforeAll
    static void startServer() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("fio");
        server = JnbdServer.start(dir,
            "--export", "cached=file:" + dir.resolve("cached.img") + ",size=64M,mode=cached",
            "--export", "direct=file:" + dir.resolve("direct.img") + ",size=64M,mode=direct",
            // large reads cut into chunks that leave out of order, with the sorting scheduler
            "--export", "chunked=file:" + dir.resolve("chunked.img")
                + ",size=64M,mode=direct,scheduler=sorted,split=128K,chunk=32K,streams=4",
            "--export", "big=memory:1G");
    }

    @AfterAll
    static void stopServer() throws Exception {
        if (server != null) server.stop();
    }

    /** export x (rw, block sizes, iodepth) */
    static Stream<Arguments> workloads() {
        List<Arguments> all = new ArrayList<>();
        for (String export : List.of("cached", "direct")) {
            all.add(Arguments.of(export, "randrw", "--bsrange=4k-256k", 16));
            all.add(Arguments.of(export, "randwrite", "--bs=4k", 1));
            all.add(Arguments.of(export, "write", "--bs=1M", 4));
            all.add(Arguments.of(export, "randrw", "--bssplit=4k/40:64k/30:512k/20:2m/10", 32));
        }
        all.add(Arguments.of("chunked", "randrw", "--bsrange=4k-1m", 16));
        // one request in flight: writes above the split threshold go to the disk chunk by chunk as they arrive
        all.add(Arguments.of("direct", "write", "--bs=4m", 1));
        all.add(Arguments.of("chunked", "randwrite", "--bsrange=4k-2m", 1));
        all.add(Arguments.of("chunked", "randrw", "--bssplit=4k/40:64k/30:512k/20:2m/10", 32));
        return all.stream();
    }

    /**
     * A memory export holds more than the JVM's default cap on off-heap memory (its heap's maximum, 512 MiB under
     * bin/jnbd): every write of 768 MiB lands and reads back. The cap used to refuse it with ENOMEM past 500 MiB.
     */
    @Test
    void aMemoryExportHoldsMoreThanTheHeapsWorthOfData() {
        Interop.Result result = Interop.run(T, dir,
            "fio", "--name=big", "--ioengine=nbd", "--uri=" + server.uri("big"), "--rw=write", "--bs=1M",
            "--iodepth=8", "--size=768M", "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--output-format=normal");
        result.assertSuccess();
        assertThat(result.output()).as(result.toString()).doesNotContainPattern("err=\\s*-?[1-9]").doesNotContain("verify: bad");
    }

    @ParameterizedTest(name = "{0}: rw={1} {2} iodepth={3}")
    @MethodSource("workloads")
    void verifiedWorkload(String export, String rw, String blockSizes, int iodepth) {
        Interop.Result result = Interop.run(T, dir,
            "fio", "--name=verify-" + export, "--ioengine=nbd", "--uri=" + server.uri(export),
            "--rw=" + rw, blockSizes, "--iodepth=" + iodepth, "--size=64M",
            "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--randrepeat=0",
            "--output-format=normal");
        result.assertSuccess();
        assertThat(result.output()).as(result.toString())
            .contains("Run status group 0")
            .doesNotContain("verify: bad")
            .doesNotContainIgnoringCase("crc32c: verify failed")
            .doesNotContainPattern("err=\\s*-?[1-9]");
    }
}
