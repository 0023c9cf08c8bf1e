package io.jnbd.interop;

import static org.assertj.core.api.Assertions.assertThat;

import io.jnbd.server.MetricsScrape;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * bin/jnbd serve --metrics, scraped while fio's nbd engine (libnbd) reads and writes a fixed amount of data and
 * after it: the counters never go back during the run, and in the end the read and write counters have moved by
 * exactly the bytes and requests fio reports.
 */
@Timeout(300)
class MetricsInteropTest {

    private static final Duration T = Duration.ofSeconds(240);

    @TempDir
    Path dir;

    @ParameterizedTest(name = "{0}")
    @CsvSource(delimiter = '|', value = {
        "mode=cached",
        // direct I/O, reads split into chunks, batches sorted and merged
        "mode=direct,scheduler=sorted,split=128K,chunk=32K,streams=4"})
    void countersMoveByWhatFioMoved(String options) throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("fio");
        int metrics = Interop.freePort();
        JnbdServer server = JnbdServer.start(dir, "--metrics", "127.0.0.1:" + metrics,
            "--export", "disk=file:" + dir.resolve("disk.img") + ",size=64M," + options);
        try {
            MetricsScrape before = MetricsScrape.of(metrics);
            Path json = dir.resolve("fio.json");
            Process fio = new ProcessBuilder("fio", "--name=metrics", "--ioengine=nbd", "--uri=" + server.uri("disk"),
                "--rw=randrw", "--bsrange=4k-256k", "--iodepth=8", "--size=48M", "--randrepeat=0",
                "--output-format=json", "--output=" + json)
                .redirectErrorStream(true).redirectOutput(dir.resolve("fio.out").toFile())
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null"))).start();
            try {
                double seen = 0;
                long deadline = System.nanoTime() + T.toNanos();
                while (fio.isAlive() && System.nanoTime() < deadline) {
                    MetricsScrape now = MetricsScrape.of(metrics);
                    double moved = bytes(now, "read") + bytes(now, "write");
                    assertThat(moved).as("bytes served so far, scraped during the run").isGreaterThanOrEqualTo(seen);
                    seen = moved;
                    Thread.sleep(20);
                }
                assertThat(fio.waitFor(10, TimeUnit.SECONDS)).as("fio finished").isTrue();
            } finally {
                fio.destroyForcibly();
            }
            assertThat(fio.exitValue()).as(Files.readString(dir.resolve("fio.out"))).isZero();

            MetricsScrape after = MetricsScrape.of(metrics);
            Map<String, Object> job = firstJob(json);
            for (String direction : List.of("read", "write")) {
                @SuppressWarnings("unchecked")
                Map<String, Object> io = (Map<String, Object>) job.get(direction);
                long ioBytes = (Long) io.get("io_bytes");
                long ios = (Long) io.get("total_ios");
                assertThat(ioBytes).as("bytes fio says it moved by %s", direction).isPositive();
                assertThat(bytes(after, direction) - bytes(before, direction)).as("%s bytes", direction).isEqualTo(ioBytes);
                assertThat(requests(after, direction) - requests(before, direction)).as("%s requests", direction).isEqualTo(ios);
            }
            assertThat(after.samples()).as(after.text())
                .doesNotContainKeys("jnbd_errors_total{errno=\"EIO\",export=\"disk\"}");
        } finally {
            server.stop();
        }
    }

    private static double bytes(MetricsScrape s, String command) {
        return s.value("jnbd_bytes_total{command=\"" + command + "\",export=\"disk\"}");
    }

    private static double requests(MetricsScrape s, String command) {
        return s.value("jnbd_requests_total{command=\"" + command + "\",export=\"disk\"}");
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> firstJob(Path json) throws Exception {
        List<Object> jobs = (List<Object>) JsonDoc.object(Files.readString(json)).get("jobs");
        return (Map<String, Object>) jobs.getFirst();
    }
}
