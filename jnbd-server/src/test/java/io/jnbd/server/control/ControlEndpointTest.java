package io.jnbd.server.control;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.jnbd.server.Export;
import io.jnbd.server.Exports;
import io.jnbd.server.ReloadableExports;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.control.ControlProtocol.Reply;
import io.jnbd.server.control.ControlProtocol.Request;
import io.jnbd.server.filter.dirty.DirtyBitmaps.Info;
import io.jnbd.server.net.UnixPeer;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The control endpoint against an export whose dirty bitmaps are a list in memory ({@link FakeDirtyBitmaps}). */
@Timeout(60)
class ControlEndpointTest {
    @TempDir
    Path dir;

    private final FakeDirtyBitmaps vm0 = new FakeDirtyBitmaps();
    private ReloadableExports registry;
    private ControlEndpoint endpoint;
    private Path socket;

    @BeforeEach
    void start() throws IOException {
        registry = new ReloadableExports(new Exports(List.of(new Export("vm0", "", vm0),
            new Export("plain", "", new MemoryBackend(1 << 20))), null), Duration.ZERO);
        socket = dir.resolve("jnbd.ctl");
        endpoint = ControlEndpoint.bind(socket);
        endpoint.serve(registry);
    }

    @AfterEach
    void stop() {
        endpoint.close();
    }

    /** A peer speaking raw lines. */
    static final class Peer implements AutoCloseable {
        final SocketChannel ch;
        final BufferedReader in;
        final OutputStream out;
        final String greeting;

        Peer(Path socket) throws IOException {
            ch = SocketChannel.open(UnixDomainSocketAddress.of(socket));
            in = new BufferedReader(new InputStreamReader(Channels.newInputStream(ch), StandardCharsets.UTF_8));
            out = Channels.newOutputStream(ch);
            greeting = in.readLine();
        }

        String ask(String line) throws IOException {
            out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            return in.readLine();
        }

        @Override
        public void close() throws IOException {
            ch.close();
        }
    }

    private Reply call(Request r) throws ControlClient.Failed {
        try (ControlClient c = ControlClient.connect(socket, Duration.ofSeconds(30))) {
            return c.call(r);
        }
    }

    @Test
    void everyOperationRoundTrips() throws Exception {
        assertThat(call(Request.list("vm0"))).isEqualTo(Reply.ok(List.of()));
        assertThat(call(Request.of(ControlProtocol.Op.ADD, "vm0", "b-monday")).succeeded()).isTrue();
        vm0.dirty("b-monday", 3 * 65536);
        assertThat(call(Request.list("vm0")).bitmaps()).containsExactly(new Info("b-monday", true, 65536, 3 * 65536));

        assertThat(call(Request.rotate("vm0", "b-monday", "b-tuesday")).succeeded()).isTrue();
        assertThat(vm0.list()).containsExactly(new Info("b-monday", false, 65536, 3 * 65536), new Info("b-tuesday", true, 65536, 0));

        assertThat(call(Request.of(ControlProtocol.Op.CLEAR, "vm0", "b-monday")).succeeded()).isTrue();
        assertThat(vm0.list().getFirst()).isEqualTo(new Info("b-monday", false, 65536, 0));

        assertThat(call(Request.of(ControlProtocol.Op.REMOVE, "vm0", "b-monday")).succeeded()).isTrue();
        assertThat(call(Request.list("vm0")).bitmaps()).containsExactly(new Info("b-tuesday", true, 65536, 0));
    }

    @Test
    void theWireIsOneJsonLinePerRequestAndReply() throws Exception {
        try (Peer p = new Peer(socket)) {
            assertThat(p.greeting).isEqualTo("{\"protocol\":\"jnbd-control\",\"version\":1}");
            assertThat(p.ask("{\"op\":\"add\",\"export\":\"vm0\",\"bitmap\":\"b0\"}")).isEqualTo("{\"ok\":true}");
            assertThat(p.ask("{\"op\":\"list\",\"export\":\"vm0\"}"))
                .isEqualTo("{\"ok\":true,\"bitmaps\":[{\"name\":\"b0\",\"recording\":true,\"granularity\":65536,\"dirty_bytes\":0}]}");
            // A carriage return before the newline is forgiven (a peer typing into socat).
            assertThat(p.ask("{\"op\":\"rotate\",\"export\":\"vm0\",\"bitmap\":\"b0\",\"next\":\"b1\"}\r")).isEqualTo("{\"ok\":true}");
        }
        assertThat(vm0.list()).extracting(Info::name).containsExactly("b0", "b1");
    }

    @Test
    void namesThatDoNotFitGetAnErrorNamingWhatExists() throws Exception {
        vm0.add("b0");
        vm0.add("b1");
        assertThat(call(Request.list("nope")).error()).isEqualTo("no export 'nope' (exports: vm0, plain)");
        assertThat(call(Request.list("plain")).error())
            .isEqualTo("export 'plain' has no dirty filter (serve it with filter=dirty,dirty-bitmap=NAME)");
        assertThat(call(Request.of(ControlProtocol.Op.CLEAR, "vm0", "b9")).error())
            .isEqualTo("export 'vm0' has no bitmap 'b9' (its bitmaps: b0, b1)");
        assertThat(call(Request.of(ControlProtocol.Op.REMOVE, "vm0", "b9")).error()).contains("has no bitmap 'b9'");
        assertThat(call(Request.rotate("vm0", "b9", "b2")).error()).contains("has no bitmap 'b9'");
        assertThat(call(Request.rotate("vm0", "b0", "b1")).error()).isEqualTo("export 'vm0' already has a bitmap 'b1'");
        assertThat(call(Request.rotate("vm0", "b0", "b0")).error()).isEqualTo("export 'vm0' already has a bitmap 'b0'");
        assertThat(call(Request.of(ControlProtocol.Op.ADD, "vm0", "b0")).error()).isEqualTo("export 'vm0' already has a bitmap 'b0'");
        // The filter's own refusal (its disk is full) reaches the operator.
        assertThat(call(Request.of(ControlProtocol.Op.ADD, "vm0", "fail-1")).error())
            .isEqualTo("export 'vm0': add failed: No space left on device");
        assertThat(vm0.list()).extracting(Info::name).containsExactly("b0", "b1");
    }

    @Test
    void badLinesGetAnErrorAndTheConnectionGoesOn() throws Exception {
        try (Peer p = new Peer(socket)) {
            assertThat(p.ask("bitmap list vm0")).startsWith("{\"ok\":false,\"error\":\"bad request: not JSON: bitmap list vm0");
            assertThat(p.ask("[1,2]")).contains("bad request: not a JSON object");
            assertThat(p.ask("{\"op\":\"frobnicate\",\"export\":\"vm0\"}")).contains("bad request: unknown op 'frobnicate'");
            assertThat(p.ask("{\"op\":\"add\",\"export\":\"vm0\"}")).contains("bad request: missing 'bitmap'");
            assertThat(p.ask("{\"op\":\"rotate\",\"export\":\"vm0\",\"bitmap\":\"a\"}")).contains("bad request: missing 'next'");
            assertThat(p.ask("{\"op\":\"add\",\"export\":\"vm0\",\"bitmap\":\"a\",\"next\":\"b\"}")).contains("add takes no next");
            assertThat(p.ask("{\"op\":\"list\",\"export\":\"vm0\",\"force\":true}")).contains("unknown key 'force'");
            assertThat(p.ask("{\"op\":\"list\",\"export\":7}")).contains("'export' must be a string");
            assertThat(p.ask("{\"op\":\"list\",\"export\":\"\"}")).contains("'export' is empty");
            assertThat(p.ask("")).contains("bad request: not a JSON object");
            assertThat(p.ask("{\"op\":\"add\",\"export\":\"vm0\",\"bitmap\":\"ok\"}")).isEqualTo("{\"ok\":true}");
        }
        assertThat(vm0.list()).extracting(Info::name).containsExactly("ok");
    }

    @Test
    void anOversizeLineGetsOneErrorAndIsDropped() throws Exception {
        try (Peer p = new Peer(socket)) {
            String huge = "{\"op\":\"add\",\"export\":\"vm0\",\"bitmap\":\"" + "x".repeat(3 * ControlProtocol.MAX_LINE) + "\"}";
            assertThat(p.ask(huge)).isEqualTo("{\"ok\":false,\"error\":\"request longer than 16384 bytes\"}");
            assertThat(p.ask("{\"op\":\"list\",\"export\":\"vm0\"}")).as("the next line is read as one").isEqualTo("{\"ok\":true,\"bitmaps\":[]}");
        }
        assertThat(vm0.list()).isEmpty();
    }

    @Test
    void aSilentPeerIsClosedAndHoldsUpNobody() throws Exception {
        Path other = dir.resolve("quick.ctl");
        try (ControlEndpoint quick = ControlEndpoint.bind(other, Duration.ofMillis(300))) {
            quick.serve(registry);
            try (Peer silent = new Peer(other); Peer half = new Peer(other)) {
                half.out.write("{\"op\":\"list\",".getBytes(StandardCharsets.UTF_8)); // and never the rest
                try (Peer busy = new Peer(other)) {
                    assertThat(busy.ask("{\"op\":\"list\",\"export\":\"vm0\"}")).startsWith("{\"ok\":true");
                }
                assertThat(silent.in.readLine()).as("closed by the server for its silence").isNull();
                assertThat(half.in.readLine()).as("closed by the server, its request never finished").isNull();
            }
        }
    }

    @Test
    void closeWaitsForAChangeUnderWay() throws Exception {
        vm0.entered = new java.util.concurrent.CountDownLatch(1);
        vm0.gate = new java.util.concurrent.CountDownLatch(1);
        try (Peer p = new Peer(socket)) {
            p.out.write("{\"op\":\"add\",\"export\":\"vm0\",\"bitmap\":\"slow-1\"}\n".getBytes(StandardCharsets.UTF_8));
            assertThat(vm0.entered.await(30, TimeUnit.SECONDS)).isTrue();
            Thread closing = Thread.ofPlatform().start(endpoint::close);
            closing.join(300);
            assertThat(closing.isAlive()).as("close waits while the add is under way").isTrue();
            vm0.gate.countDown();
            closing.join(TimeUnit.SECONDS.toMillis(30));
            assertThat(closing.isAlive()).isFalse();
        }
        assertThat(vm0.list()).extracting(Info::name).containsExactly("slow-1");
        assertThat(socket).doesNotExist();
    }

    @Test
    void aReloadIsSeenAtOnce() throws Exception {
        FakeDirtyBitmaps vm1 = new FakeDirtyBitmaps();
        registry.replace(new Exports(List.of(new Export("vm1", "", vm1)), null));
        assertThat(call(Request.list("vm0")).error()).isEqualTo("no export 'vm0' (exports: vm1)");
        assertThat(call(Request.of(ControlProtocol.Op.ADD, "vm1", "b0")).succeeded()).isTrue();
        assertThat(vm1.list()).extracting(Info::name).containsExactly("b0");
        assertThat(vm0.list()).isEmpty();
    }

    @Test
    void theSocketIsTheOwnersAloneAndGoesAtClose() throws Exception {
        assertThat(PosixFilePermissions.toString(Files.getPosixFilePermissions(socket))).isEqualTo("rw-------");
        assertThat((Integer) Files.getAttribute(socket, "unix:mode") & 0170000).as("a socket").isEqualTo(0140000);
        try (Stream<Path> files = Files.list(dir)) {
            assertThat(files).as("the private directory it was bound in is gone").containsExactly(socket);
        }
        endpoint.close();
        assertThat(socket).doesNotExist();
        assertThatThrownBy(() -> ControlClient.connect(socket, Duration.ofSeconds(5)))
            .hasMessage("no server control socket at " + socket + " (is the server running with --control=" + socket + "?)");
    }

    @Test
    void aClientThatMayNotConnectIsToldWhoMay() throws Exception {
        // What the kernel's EACCES becomes in the JDK (a BindException, on connect too); root cannot meet it here.
        assertThat(ControlClient.whyNotConnected(socket, new java.net.BindException("Permission denied")))
            .isEqualTo("permission denied on control socket " + socket + ": only "
                + (UnixPeer.selfUid() == 0 ? "root" : Files.getOwner(socket).getName() + " (the server's user) and root") + " may use it");
        assertThat(ControlClient.whyNotConnected(socket, new java.net.SocketException("Protocol wrong type for socket")))
            .isEqualTo("cannot connect to control socket " + socket + ": Protocol wrong type for socket");
    }

    @Test
    void aSecondServerOnTheSamePathIsRefusedAndTheFirstGoesOn() {
        assertThatThrownBy(() -> ControlEndpoint.bind(socket))
            .hasMessage("another server is listening on control socket " + socket);
        assertThat(socket).exists();
        try {
            assertThat(call(Request.list("vm0")).succeeded()).isTrue();
        } catch (ControlClient.Failed e) {
            throw new AssertionError(e);
        }
    }

    @Test
    void aStaleSocketIsReplacedAndOtherFilesAreNot() throws Exception {
        Path stale = dir.resolve("stale.ctl");
        try (ServerSocketChannel dead = ServerSocketChannel.open(StandardProtocolFamily.UNIX)) {
            dead.bind(UnixDomainSocketAddress.of(stale)); // closing leaves the file, as a killed server does
        }
        assertThatThrownBy(() -> ControlClient.connect(stale, Duration.ofSeconds(5)))
            .hasMessage("no server listening on control socket " + stale + " (is the server running with --control=" + stale + "?)");
        try (ControlEndpoint second = ControlEndpoint.bind(stale)) {
            second.serve(registry);
            try (ControlClient c = ControlClient.connect(stale, Duration.ofSeconds(5))) {
                assertThat(c.call(Request.list("vm0")).succeeded()).isTrue();
            }
        }
        Path file = Files.writeString(dir.resolve("notes.txt"), "keep me");
        assertThatThrownBy(() -> ControlEndpoint.bind(file)).hasMessage(file + " exists and is not a socket: not replacing it");
        assertThat(Files.readString(file)).isEqualTo("keep me");
    }

    @Test
    void aDirectoryAnyoneMayWriteIsRefusedUnlessSticky() throws Exception {
        Path open = Files.createDirectory(dir.resolve("open"));
        Files.setPosixFilePermissions(open, PosixFilePermissions.fromString("rwxrwxrwx"));
        assertThatThrownBy(() -> ControlEndpoint.bind(open.resolve("c.ctl")))
            .hasMessageStartingWith("directory " + open + " is writable by every user and not sticky");
        assertThat(open.resolve("c.ctl")).doesNotExist();
        Files.setAttribute(open, "unix:mode", 01777);
        try (ControlEndpoint sticky = ControlEndpoint.bind(open.resolve("c.ctl"))) {
            assertThat(open.resolve("c.ctl")).exists();
        }
    }

    @Test
    void thePeerRuleIsTheServersUserOrRoot() throws Exception {
        try (SocketChannel ch = SocketChannel.open(UnixDomainSocketAddress.of(socket))) {
            UnixPeer server = UnixPeer.of(ch);
            assertThat(server.selfOrRoot()).isTrue();
            assertThat(server.pid()).as("the server is this process").isEqualTo(ProcessHandle.current().pid());
            assertThat(server.uid()).isEqualTo(UnixPeer.selfUid());
        }
    }

    /**
     * A peer running as another user, on a socket made reachable to it on purpose: the kernel's SO_PEERCRED names it
     * and it is turned away with one line, whatever it sends. Needs root (to become nobody), setpriv and perl.
     */
    @Test
    void aPeerOfAnotherUserIsRefused() throws Exception {
        assumeTrue(UnixPeer.selfUid() == 0, "runs as root, to connect as nobody");
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/setpriv")) && Files.isExecutable(Path.of("/usr/bin/perl")), "setpriv and perl");
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwx--x--x"));
        Files.setPosixFilePermissions(socket, PosixFilePermissions.fromString("rw-rw-rw-"));
        String script = "use IO::Socket::UNIX; my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die \"connect: $!\\n\";"
            + " print $s qq({\"op\":\"add\",\"export\":\"vm0\",\"bitmap\":\"intruder\"}\\n); print scalar <$s>; print scalar(<$s>) // \"EOF\\n\";";
        Process p = new ProcessBuilder("/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            "/usr/bin/perl", "-e", script, socket.toString()).redirectErrorStream(true).start();
        assertThat(p.waitFor(30, TimeUnit.SECONDS)).isTrue();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(out).isEqualTo("{\"ok\":false,\"error\":\"permission denied: only uid 0 and root may use this control socket\"}\nEOF\n");
        assertThat(vm0.list()).isEmpty();
    }

    @Test
    void withoutItsModeTheSocketRefusesOthersInTheKernel() throws Exception {
        assumeTrue(UnixPeer.selfUid() == 0, "runs as root, to connect as nobody");
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/setpriv")) && Files.isExecutable(Path.of("/usr/bin/perl")), "setpriv and perl");
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwx--x--x")); // only the socket's 0600 stands in the way
        Process p = new ProcessBuilder("/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            "/usr/bin/perl", "-e", "use IO::Socket::UNIX; IO::Socket::UNIX->new(Peer => $ARGV[0]) or die \"connect: $!\\n\"; print \"connected\\n\";",
            socket.toString()).redirectErrorStream(true).start();
        assertThat(p.waitFor(30, TimeUnit.SECONDS)).isTrue();
        assertThat(new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8)).isEqualTo("connect: Permission denied\n");
    }
}
