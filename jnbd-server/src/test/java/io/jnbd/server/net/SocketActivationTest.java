package io.jnbd.server.net;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.jnbd.server.io.NativeSocket;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A listening socket passed as systemd passes it (a descriptor nobody in the process owns, named by LISTEN_FDS)
 * becomes a listener that accepts on it, TCP and Unix; what is not a listening socket is refused with a message
 * that says so. The descriptor stands in for 3: the test JVM has its own files there.
 */
@Timeout(30)
class SocketActivationTest {
    private static final long PID = ProcessHandle.current().pid();
    private static final MethodHandle DUP = Linker.nativeLinker().downcallHandle(
        Linker.nativeLinker().defaultLookup().find("dup").orElseThrow(),
        FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));

    @TempDir
    Path dir;

    @BeforeEach
    void nativeAccess() throws Exception {
        boolean fdVisible;
        try (ServerSocketChannel probe = ServerSocketChannel.open()) {
            fdVisible = NativeSocket.fd(probe) >= 0;
        }
        assumeTrue(NativeSocket.AVAILABLE && fdVisible,
            "needs native access and --add-exports java.base/sun.nio.ch (the build's surefire passes both)");
    }

    /** A descriptor of a listening socket that no channel owns, as systemd hands it over, and its address. */
    private record Passed(int fd, SocketAddress address) {}

    private static Passed passed(ServerSocketChannel bound) throws Throwable {
        try (bound) {
            int fd = (int) DUP.invokeExact(NativeSocket.fd(bound));
            assertThat(fd).isPositive();
            return new Passed(fd, bound.getLocalAddress());
        }
    }

    private static Map<String, String> env(int n) {
        return Map.of("LISTEN_PID", Long.toString(PID), "LISTEN_FDS", Integer.toString(n), "LISTEN_FDNAMES", "nbd");
    }

    @Test
    void aPassedTcpSocketAccepts() throws Throwable {
        ServerSocketChannel original = ServerSocketChannel.open();
        original.bind(new InetSocketAddress("127.0.0.1", 0));
        Passed p = passed(original);
        List<Listener> listeners = SocketActivation.inherited(env(1), PID, p.fd());
        assertThat(listeners).hasSize(1);
        try (Listener l = listeners.getFirst()) {
            assertThat(l.activated()).isTrue();
            assertThat(l.address()).isEqualTo(p.address());
            assertThat(l.describe()).endsWith("(passed by socket activation, nbd)");
            try (SocketChannel client = SocketChannel.open(p.address())) {
                Listener.Accepted accepted = l.accept();
                assertThat(accepted.remote()).isEqualTo(client.getLocalAddress());
                client.write(ByteBuffer.wrap(new byte[] {42}));
                ByteBuffer in = ByteBuffer.allocate(1);
                accepted.transport().receive(in);
                assertThat(in.get(0)).isEqualTo((byte) 42);
                accepted.transport().close();
            }
        }
    }

    @Test
    void aPassedUnixSocketAcceptsAndItsFileStays() throws Throwable {
        Path path = dir.resolve("nbd.sock");
        ServerSocketChannel original = ServerSocketChannel.open(java.net.StandardProtocolFamily.UNIX);
        original.bind(UnixDomainSocketAddress.of(path));
        Passed p = passed(original);
        List<Listener> listeners = SocketActivation.inherited(env(1), PID, p.fd());
        try (Listener l = listeners.getFirst()) {
            assertThat(l.address()).isEqualTo(UnixDomainSocketAddress.of(path));
            try (SocketChannel client = SocketChannel.open(UnixDomainSocketAddress.of(path))) {
                l.accept().transport().close();
            }
        }
        assertThat(Files.exists(path)).as("the socket file belongs to whoever bound it").isTrue();
    }

    @Test
    void anotherProcesssSocketsAreLeftAlone() throws Exception {
        assertThat(SocketActivation.inherited(Map.of("LISTEN_PID", "1", "LISTEN_FDS", "1"), PID, 3)).isEmpty();
        assertThat(SocketActivation.inherited(Map.of(), PID, 3)).isEmpty();
    }

    @Test
    void whatIsNotAListeningSocketIsRefused() throws Throwable {
        assertThatThrownBy(() -> SocketActivation.inherited(Map.of("LISTEN_PID", Long.toString(PID), "LISTEN_FDS", "x"), PID, 3))
            .isInstanceOf(SocketActivation.Unusable.class).hasMessage("LISTEN_FDS=x is not a number");
        try (ServerSocketChannel server = ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0));
             SocketChannel connected = SocketChannel.open(server.getLocalAddress())) {
            int fd = NativeSocket.fd(connected);
            assertThatThrownBy(() -> SocketActivation.inherited(env(1), PID, fd))
                .isInstanceOf(SocketActivation.Unusable.class)
                .hasMessage("LISTEN_FDS socket " + fd + " (nbd): descriptor " + fd + " is a socket that does not listen");
            assertThat(connected.isOpen()).as("a refused descriptor is not touched").isTrue();
        }
    }
}
