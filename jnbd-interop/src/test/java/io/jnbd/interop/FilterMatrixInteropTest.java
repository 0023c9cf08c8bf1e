package io.jnbd.interop;

import static io.jnbd.interop.FilterMatrix.MiB;
import static io.jnbd.interop.FilterMatrix.RANGE_LENGTH;
import static io.jnbd.interop.FilterMatrix.RANGE_OFFSET;
import static io.jnbd.interop.FilterMatrix.SEED_BYTE;
import static io.jnbd.interop.FilterMatrix.SIZE;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;
import static org.junit.jupiter.api.DynamicContainer.dynamicContainer;
import static org.junit.jupiter.api.DynamicTest.dynamicTest;

import io.jnbd.client.Peer;
import io.jnbd.interop.FilterMatrix.Backend;
import io.jnbd.interop.FilterMatrix.Row;
import io.jnbd.server.backend.FilterFactories;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DynamicNode;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.io.TempDir;

/**
 * Every filter of {@link FilterMatrix#ROWS} in front of every kind of backend (a file through the page cache, a file
 * with O_DIRECT, memory, a pool, an nbd: export of nbdkit), each seen by three real clients: nbdcopy, fio's nbd
 * engine and qemu-io, each checking the row's promise as far as it can see it. One {@code jnbd serve} holds every
 * export, over one pool of three memory servers and one nbdkit serving a directory of files as the upstream. The
 * clients of one export run in a fixed order (nbdcopy, fio, qemu-io), since qemu-io's checks of
 * {@link FilterMatrix.Promise#WRITES_FAIL} zero a range that the others read as it was put there.
 */
class FilterMatrixInteropTest {

    private static final Duration T = Duration.ofSeconds(120);

    @TempDir
    static Path dir;
    static Peer upstream;
    static PoolCluster pool;
    static JnbdServer server;
    /** A seeded export's content: SEED_BYTE at [0, 1M), seeded random data with zero stretches after it. */
    static Path seed;
    static Path zeros;
    /** What nbdcopy writes: SIZE of random data with zero stretches, and its first half. */
    static Path source;
    static Path half;
    /** 1M of random bytes without a zero block, so that nbdcopy writes it all (it sends zero blocks as WRITE_ZEROES). */
    static Path dense;

    @BeforeAll
    static void start() throws Exception {
        Interop.requireEnabled();
        Interop.requireCommands("qemu-io", "nbdcopy", "fio", "nbdkit");
        makeImages();
        Path files = Files.createDirectories(dir.resolve("files"));
        Path upstreamFiles = Files.createDirectories(dir.resolve("upstream"));
        for (Row row : present()) {
            for (Backend b : List.of(Backend.CACHED, Backend.DIRECT)) preload(row, files.resolve(row.export(b) + ".img"));
            preload(row, upstreamFiles.resolve(row.name() + ".img"));
        }
        Path socket = dir.resolve("nbdkit.sock");
        upstream = Peer.startUnix(socket, List.of("nbdkit", "--foreground", "--exit-with-parent", "--unix",
            socket.toString(), "file", "dir=" + upstreamFiles));
        pool = new PoolCluster(dir.resolve("pool")).startMemservers();

        List<String> args = new ArrayList<>();
        int poolClient = 100;
        for (Row row : present()) {
            for (Backend b : Backend.values()) {
                String backend = switch (b) {
                    case CACHED -> "file:" + files.resolve(row.export(b) + ".img") + ",size=16M";
                    case DIRECT -> "file:" + files.resolve(row.export(b) + ".img") + ",size=16M,mode=direct";
                    case MEMORY -> "memory:16M";
                    // A client id each, so that no two pools share a space on the memory servers by chance.
                    case POOL -> "pool:" + pool.addresses() + ",size=16M,replicas=2,server-timeout=2,client=" + poolClient++;
                    case NBD -> "nbd:nbd+unix:///" + row.name() + ".img?socket=" + socket;
                };
                args.addAll(List.of("--export", row.export(b) + "=" + backend + "," + row.spec()));
            }
        }
        STACKS.forEach((name, spec) -> args.addAll(List.of("--export", name + "=memory:16M," + spec)));
        server = JnbdServer.start(dir.resolve("serve"), args.toArray(String[]::new));
        for (Row row : present()) awaitPoolUp(row.export(Backend.POOL));
    }

    @AfterAll
    static void stop() throws Exception {
        if (server != null) server.stop();
        if (pool != null) pool.close();
        if (upstream != null) upstream.close();
    }

    private static List<Row> present() {
        return FilterMatrix.ROWS.stream().filter(Row::present).toList();
    }

    private static void makeImages() throws IOException {
        seed = dir.resolve("seed.img");
        Interop.writeRandomImage(seed, SIZE, 31);
        try (RandomAccessFile f = new RandomAccessFile(seed.toFile(), "rw")) {
            byte[] first = new byte[MiB];
            Arrays.fill(first, (byte) SEED_BYTE);
            f.write(first);
        }
        zeros = dir.resolve("zeros.img");
        try (RandomAccessFile f = new RandomAccessFile(zeros.toFile(), "rw")) {
            f.setLength(SIZE);
        }
        source = dir.resolve("source.img");
        Interop.writeRandomImage(source, SIZE, 32);
        half = dir.resolve("half.img");
        Files.write(half, Interop.readAt(source, 0, (int) (SIZE / 2)));
        byte[] random = new byte[MiB];
        new Random(33).nextBytes(random);
        dense = Files.write(dir.resolve("dense.img"), random);
    }

    /** The file behind a file export or the upstream's export: the seed for a row that needs one, else a sparse file. */
    private static void preload(Row row, Path file) throws IOException {
        if (row.promise().seeded()) {
            Files.copy(seed, file);
        } else {
            try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "rw")) {
                f.setLength(SIZE);
            }
        }
    }

    /** A pool takes writes once it is connected to its memory servers; wait for that, bounded. */
    private static void awaitPoolUp(String export) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        String last = "(no status read)";
        while (System.nanoTime() < deadline) {
            try {
                last = PoolCluster.document(server.port(), export + "/status");
                List<?> servers = (List<?>) JsonDoc.object(last).get("servers");
                if (servers.size() == PoolCluster.SERVERS && servers.stream().allMatch(s -> "up".equals(((Map<?, ?>) s).get("state")))) {
                    return;
                }
            } catch (IOException | RuntimeException e) {
                last = "(status unreadable: " + e + ")";
            }
            Thread.sleep(100);
        }
        fail("pool export %s: not every memory server up within 60s; last status:%n%s", export, last);
    }

    /** What a seeded export holds, or what an export of a backend that cannot be preloaded holds: zeroes. */
    private static Path expected(Row row, Backend b) {
        return row.promise().seeded() && b.preloadable() ? seed : zeros;
    }

    private static int expectedFirstByte(Row row, Backend b) {
        return expected(row, b) == seed ? SEED_BYTE : 0;
    }

    private static String hex(int b) {
        return String.format("0x%02x", b);
    }

    // ---- the matrix ----

    @TestFactory
    Stream<DynamicNode> everyFilterOnEveryBackendThroughEveryClient() {
        return FilterMatrix.ROWS.stream().map(row -> dynamicContainer(row.name(), Arrays.stream(Backend.values())
            .map(b -> dynamicContainer(row.name() + " on " + b, Stream.of(
                dynamicTest("nbdcopy", () -> cell(row, () -> nbdcopyChecks(row, b))),
                dynamicTest("fio", () -> cell(row, () -> fioChecks(row, b))),
                dynamicTest("qemu-io", () -> cell(row, () -> qemuIoChecks(row, b))))))));
    }

    private interface Check {
        void run() throws Exception;
    }

    private static void cell(Row row, Check check) throws Exception {
        assumeTrue(row.present(), "filter '" + row.filter() + "' is not in this build: its row runs once it lands");
        check.run();
    }

    private static void nbdcopyChecks(Row row, Backend b) throws Exception {
        String uri = server.uri(row.export(b));
        switch (row.promise()) {
            case TRANSPARENT -> {
                Interop.run(T, dir, "nbdcopy", "--flush", source.toString(), uri).assertSuccess();
                copyOut(row, b).assertSuccess();
                assertThat(Files.mismatch(source, out(row, b))).as("first differing byte of what nbdcopy copied in and out")
                    .isEqualTo(-1L);
            }
            case READ_ONLY -> {
                copyOut(row, b).assertSuccess();
                assertThat(Files.mismatch(expected(row, b), out(row, b))).as("first differing byte read").isEqualTo(-1L);
                assertFails(Interop.run(T, dir, "nbdcopy", source.toString(), uri), "read-only");
            }
            case WRITES_FAIL -> {
                assertFails(Interop.run(T, dir, "nbdcopy", dense.toString(), uri), "No space left on device");
                copyOut(row, b).assertSuccess();
                assertThat(Files.mismatch(expected(row, b), out(row, b)))
                    .as("first differing byte read after the failed writes").isEqualTo(-1L);
            }
            case FAILS_IN_RANGE -> {
                // the first half of the export lies before the range; the whole export covers it
                Interop.run(T, dir, "nbdcopy", "--flush", half.toString(), uri).assertSuccess();
                assertFails(Interop.run(T, dir, "nbdcopy", source.toString(), uri), "Input/output error");
                assertFails(copyOut(row, b), "Input/output error");
            }
        }
    }

    private static Path out(Row row, Backend b) {
        return dir.resolve("out-" + row.export(b) + ".img");
    }

    /** nbdcopy from the export to {@link #out}. */
    private static Interop.Result copyOut(Row row, Backend b) throws IOException {
        Path out = out(row, b);
        Files.deleteIfExists(out);
        Files.createFile(out);
        return Interop.run(T, dir, "nbdcopy", server.uri(row.export(b)), out.toString());
    }

    private static void fioChecks(Row row, Backend b) {
        String uri = server.uri(row.export(b));
        String pattern = "--verify_pattern=" + hex(expectedFirstByte(row, b));
        switch (row.promise()) {
            case TRANSPARENT -> fioSucceeds(fio(uri, "--rw=randrw", "--bsrange=4k-256k", "--iodepth=16", "--size=16M",
                "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--randrepeat=0"));
            case READ_ONLY -> {
                fioFails(fio(uri, "--rw=write", "--bs=64k", "--size=1M"), 1, "Operation not permitted");
                fioSucceeds(fio(uri, "--rw=read", "--bs=64k", "--size=1M", "--verify=pattern", pattern));
            }
            case WRITES_FAIL -> {
                fioFails(fio(uri, "--rw=write", "--bs=64k", "--size=1M"), 28, "No space left on device");
                fioSucceeds(fio(uri, "--rw=read", "--bs=64k", "--size=1M", "--verify=pattern", pattern));
            }
            case FAILS_IN_RANGE -> {
                fioSucceeds(fio(uri, "--rw=randrw", "--bsrange=4k-256k", "--iodepth=16", "--offset=0", "--size=8M",
                    "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--randrepeat=0"));
                fioFails(fio(uri, "--rw=write", "--bs=64k", "--offset=11M", "--size=2M"), 5, "Input/output error");
                long after = RANGE_OFFSET + RANGE_LENGTH;
                fioSucceeds(fio(uri, "--rw=read", "--bs=64k", "--offset=" + after, "--size=" + (SIZE - after)));
            }
        }
    }

    private static void qemuIoChecks(Row row, Backend b) {
        String uri = server.uri(row.export(b));
        switch (row.promise()) {
            case TRANSPARENT -> qemuIoSucceeds(qemuIo(uri, false,
                "write -P 0xab 0 1M", "read -P 0xab 0 1M",
                "write -f -P 0x11 5M 4k", "flush", "read -P 0x11 5M 4k",
                "write -P 0x77 8M 2M", "write -z 8M 1M", "read -P 0 8M 1M", "read -P 0x77 9M 1M",
                "write -P 0x3c 12M 512", "read -P 0x3c 12M 512",
                "aio_write -P 0x5a 13M 2M", "aio_flush", "read -P 0x5a 13M 2M"));
            case READ_ONLY -> {
                // qemu opens a read-only export read-write only to be told it cannot
                assertFails(qemuIo(uri, false, "read 0 4k"), "Permission denied");
                Interop.Result r = qemuIo(uri, true, "read -P " + hex(expectedFirstByte(row, b)) + " 0 1M", "write -P 0x01 0 64k");
                assertThat(r.output()).as(r.toString()).contains("read 1048576/1048576 bytes", "Block node is read-only")
                    .doesNotContain("Pattern verification failed").doesNotContain("wrote");
            }
            case WRITES_FAIL -> {
                Interop.Result r = qemuIo(uri, false, "write -P 0x01 0 64k");
                assertThat(r.output()).as(r.toString()).contains("write failed: No space left on device").doesNotContain("wrote");
                // the failed write changed nothing; zeroes and flushes are other commands, and work
                qemuIoSucceeds(qemuIo(uri, false, "read -P " + hex(expectedFirstByte(row, b)) + " 0 1M",
                    "write -z 2M 64k", "read -P 0 2M 64k", "flush"));
            }
            case FAILS_IN_RANGE -> {
                // [12224k, 12288k) ends where the range starts; [12352k, 12416k) starts where it ends
                qemuIoSucceeds(qemuIo(uri, false, "write -P 0x21 0 1M", "read -P 0x21 0 1M",
                    "write -P 0x22 12224k 64k", "read -P 0x22 12224k 64k",
                    "write -P 0x23 12352k 64k", "read -P 0x23 12352k 64k", "flush"));
                Interop.Result r = qemuIo(uri, false, "read 12M 4k", "write -P 0x24 12284k 8k", "read 12348k 8k",
                    "write -z 12M 64k");
                assertThat(r.output().split("Input/output error", -1)).as("each of the four requests that touch the range fails: %s", r)
                    .hasSize(5);
                assertThat(r.output()).as(r.toString()).doesNotContain("wrote", "read 4096/4096", "read 8192/8192");
                // the write across the range's start failed whole: the bytes before the range are as they were
                qemuIoSucceeds(qemuIo(uri, false, "read -P 0x22 12224k 64k", "read -P 0x23 12352k 64k"));
            }
        }
    }

    // ---- stacks: does the order matter? ----

    /**
     * Stacks on memory exports, outermost filter first as nbdkit's --filter order: a request meets the first named
     * first. Three hold readonly, delay and error in different orders; two hold delay and error both ways; once the cache
     * filter is in the build, two more hold cache, delay and error, cache outermost and innermost.
     */
    static final Map<String, String> STACKS = stacks();

    private static Map<String, String> stacks() {
        Map<String, String> stacks = new LinkedHashMap<>();
        stacks.put("stack-ro-delay-error", "filter=readonly," + delay() + "," + rangeError());
        stacks.put("stack-delay-error-ro", delay() + "," + rangeError() + ",filter=readonly");
        stacks.put("stack-error-ro-delay", rangeError() + ",filter=readonly," + delay());
        stacks.put("order-delay-error", "filter=delay,delay-zero=1ms,filter=error,error=ENOSPC,error-zero-rate=100%");
        stacks.put("order-error-delay", "filter=error,error=ENOSPC,error-zero-rate=100%,filter=delay,delay-zero=1ms");
        if (FilterFactories.of("cache") != null) {
            String cache = "filter=cache,cache=writeback";
            String failingWrites = "filter=error,error=ENOSPC,error-pwrite-rate=100%";
            stacks.put("order-cache-delay-error", cache + "," + delay() + "," + failingWrites);
            stacks.put("order-error-delay-cache", failingWrites + "," + delay() + "," + cache);
        }
        return stacks;
    }

    private static String delay() {
        return "filter=delay,delay-read=1ms,delay-write=1ms,delay-zero=1ms";
    }

    /** Every command touching [4M, 4M + 64K) fails with EIO. */
    private static String rangeError() {
        return "filter=error,error=EIO,error-rate=100%,error-offset=4M,error-length=64K";
    }

    @TestFactory
    Stream<DynamicNode> readonlyAnswersWritesAtTheEdgeWhereverItStandsInAStackOfThree() {
        return Stream.of("stack-ro-delay-error", "stack-delay-error-ro", "stack-error-ro-delay").map(export -> dynamicTest(export, () -> {
            // The server refuses writes to a read-only export before any filter sees them: so a write into the
            // error filter's range gets EPERM, never the error filter's EIO, in every order. (In nbdkit a
            // readonly filter behind error would let error answer first.) The client below sends the writes
            // that a real client refuses itself on seeing NBD_FLAG_READ_ONLY.
            try (RawNbdClient c = RawNbdClient.open(server.port(), export)) {
                assertThat(c.write(0, new byte[4096])).as("NBD error of a write outside the range").isEqualTo(1);
                assertThat(c.write(4L << 20, new byte[4096])).as("NBD error of a write into the error filter's range").isEqualTo(1);
                c.disconnect();
            }
            // Reads pass readonly wherever it stands, and meet the error filter wherever it stands.
            Interop.Result r = qemuIo(server.uri(export), true, "read -P 0 0 1M", "read 4M 4k", "read -P 0 4160k 64k");
            assertThat(r.output()).as(r.toString()).contains("read 1048576/1048576 bytes", "read failed: Input/output error",
                "read 65536/65536 bytes").doesNotContain("Pattern verification failed");
        }));
    }

    /**
     * Where order shows: delay (with its default delay-fast-zero=true) answers a zero that must be fast with ENOTSUP
     * before passing it on, and error fails every zero with ENOSPC. Whichever stands outermost answers a fast zero
     * (qemu-io's write -z -n sends NBD_CMD_FLAG_FAST_ZERO); a plain zero passes delay and meets error either way.
     */
    @TestFactory
    Stream<DynamicNode> theOuterOfDelayAndErrorAnswersAFastZero() {
        return Stream.of(
            dynamicTest("delay outermost", () -> {
                assertFirstWriteFails("order-delay-error", "write -z -n 0 64k", "Operation not supported");
                assertFirstWriteFails("order-delay-error", "write -z 0 64k", "No space left on device");
            }),
            dynamicTest("error outermost", () -> {
                assertFirstWriteFails("order-error-delay", "write -z -n 0 64k", "No space left on device");
                assertFirstWriteFails("order-error-delay", "write -z 0 64k", "No space left on device");
            }));
    }

    /**
     * Enabled once the cache filter lands. Three filters where order shows without readonly: a write-back cache
     * outermost takes writes that error, behind it, fails only when the cache writes them back at the flush;
     * error outermost fails them at once, and the cache behind it has nothing to write back.
     */
    @TestFactory
    Stream<DynamicNode> aWriteBackCacheInFrontOfErrorDefersItsFailureToTheFlush() {
        return Stream.of(
            dynamicTest("cache outermost", () -> {
                assumeTrue(FilterFactories.of("cache") != null, "filter 'cache' is not in this build: this runs once it lands");
                Interop.Result r = qemuIo(server.uri("order-cache-delay-error"), false, "write -P 0x61 0 64k",
                    "read -P 0x61 0 64k", "flush");
                // qemu-io prints nothing for a failed flush; its exit status says a command failed, and the output
                // that the write and the read did not
                assertThat(r.exitCode()).as(r.toString()).isNotZero();
                assertThat(r.output()).as(r.toString()).contains("wrote 65536/65536 bytes", "read 65536/65536 bytes")
                    .doesNotContain("failed");
            }),
            dynamicTest("error outermost", () -> {
                assumeTrue(FilterFactories.of("cache") != null, "filter 'cache' is not in this build: this runs once it lands");
                Interop.Result r = qemuIo(server.uri("order-error-delay-cache"), false, "write -P 0x61 0 64k");
                assertThat(r.output()).as(r.toString()).contains("write failed: No space left on device").doesNotContain("wrote");
                qemuIoSucceeds(qemuIo(server.uri("order-error-delay-cache"), false, "read -P 0 0 64k", "flush"));
            }));
    }

    private static void assertFirstWriteFails(String export, String command, String message) {
        Interop.Result r = qemuIo(server.uri(export), false, command);
        assertThat(r.output()).as(r.toString()).contains("write failed: " + message).doesNotContain("wrote");
    }

    // ---- the clients ----

    /**
     * qemu-io -f raw -t writeback [-r] URI -c CMD...: every command runs, whether the ones before it failed or not.
     * qemu-io's default cache mode is writethrough, which sends every write with FUA; writeback sends FUA only where
     * a command asks for it (write -f), so that a write-back cache filter holds plain writes back.
     */
    private static Interop.Result qemuIo(String uri, boolean readOnly, String... commands) {
        List<String> argv = new ArrayList<>(List.of("qemu-io", "-f", "raw", "-t", "writeback"));
        if (readOnly) argv.add("-r");
        argv.add(uri);
        for (String c : commands) {
            argv.add("-c");
            argv.add(c);
        }
        return Interop.run(T, dir, argv);
    }

    private static void qemuIoSucceeds(Interop.Result r) {
        r.assertSuccess();
        assertThat(r.output()).as(r.toString())
            .doesNotContain("Pattern verification failed")
            .doesNotContainIgnoringCase("failed")
            .doesNotContainIgnoringCase("error");
    }

    private static Interop.Result fio(String uri, String... args) {
        List<String> argv = new ArrayList<>(List.of("fio", "--name=matrix", "--ioengine=nbd", "--uri=" + uri,
            "--output-format=normal"));
        argv.addAll(List.of(args));
        return Interop.run(T, dir, argv);
    }

    private static void fioSucceeds(Interop.Result r) {
        r.assertSuccess();
        assertThat(r.output()).as(r.toString())
            .contains("Run status group 0")
            .doesNotContain("verify: bad")
            .doesNotContainIgnoringCase("verify failed")
            .doesNotContainPattern("err=\\s*-?[1-9]");
    }

    private static void fioFails(Interop.Result r, int errno, String message) {
        assertThat(r.exitCode()).as(r.toString()).isNotZero();
        assertThat(r.output()).as(r.toString()).containsPattern("err=\\s*" + errno + "\\b").contains("error=" + message);
    }

    private static void assertFails(Interop.Result r, String message) {
        assertThat(r.exitCode()).as(r.toString()).isNotZero();
        assertThat(r.output()).as(r.toString()).contains(message);
    }
}
