package io.jnbd.server.io;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The table of Linux constants held against the running kernel: each constant must do what its name says here,
 * so a row copied from another architecture fails (x86-64's O_DIRECT is aarch64's O_DIRECTORY).
 */
class LinuxAbiTest {
    private static final int F_GETFD = 1, F_GETFL = 3, FD_CLOEXEC = 1;
    private static final int ENOTDIR = 20;

    @Test
    void rowsByOsArch() {
        assertThat(LinuxAbi.of("amd64")).containsSame(LinuxAbi.X86_64);
        assertThat(LinuxAbi.of("x86_64")).containsSame(LinuxAbi.X86_64);
        assertThat(LinuxAbi.of("aarch64")).containsSame(LinuxAbi.AARCH64);
        // Architectures whose constants were not checked get no row, so native calls stay off there.
        assertThat(LinuxAbi.of("riscv64")).isEmpty();
        assertThat(LinuxAbi.of("ppc64le")).isEmpty();
        assertThat(LinuxAbi.of("s390x")).isEmpty();
        // The pair that must never be swapped.
        assertThat(LinuxAbi.X86_64.oDirect()).isEqualTo(LinuxAbi.AARCH64.oDirectory()).isEqualTo(0x4000);
        assertThat(LinuxAbi.AARCH64.oDirect()).isEqualTo(LinuxAbi.X86_64.oDirectory()).isEqualTo(0x10000);
    }

    @Test
    void knownArchitectureTurnsNativeCallsOn() {
        assumeTrue(System.getProperty("os.name").toLowerCase().contains("linux"), "Linux");
        assumeTrue(LinuxAbi.of(System.getProperty("os.arch")).isPresent(), "an architecture in the table");
        assertThat(LinuxAbi.CURRENT).isNotNull();
        assertThat(NativeIo.AVAILABLE).as("NativeIo on with native access").isTrue();
        assertThat(NativeSocket.AVAILABLE).as("NativeSocket on with native access").isTrue();
    }

    @Test
    void openFlagsReadBackAsWhatTheyAreNamed(@TempDir Path dir) throws Throwable {
        LinuxAbi abi = current();
        Path file = Files.write(dir.resolve("f"), new byte[8192]);
        int fd = NativeIo.open(file, true, abi.oDirect()).orElseThrow();
        try {
            int flags = fcntl(fd, F_GETFL);
            assertThat(flags & abi.oDirect()).as("O_DIRECT set, flags %o", flags).isEqualTo(abi.oDirect());
            assertThat(flags & abi.oDirectory()).as("O_DIRECTORY clear, flags %o", flags).isZero();
            assertThat(fcntl(fd, F_GETFD) & FD_CLOEXEC).as("O_CLOEXEC set").isEqualTo(FD_CLOEXEC);
        } finally {
            NativeIo.close(fd);
        }
        // O_DIRECTORY refuses a regular file and opens a directory: it is no other flag.
        assertThatThrownBy(() -> NativeIo.open(file, false, abi.oDirectory()))
            .isInstanceOfSatisfying(NativeIo.ErrnoException.class, e -> assertThat(e.errno()).isEqualTo(ENOTDIR));
        NativeIo.close(NativeIo.open(dir, false, abi.oDirectory()).orElseThrow());
    }

    @Test
    void socketConstantsDoWhatTheyAreNamed() throws Throwable {
        current();
        try (ServerSocketChannel listener = ServerSocketChannel.open()
                .bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
             SocketChannel sender = SocketChannel.open(listener.getLocalAddress());
             SocketChannel receiver = listener.accept();
             Arena arena = Arena.ofConfined()) {
            int fd = NativeSocket.fd(receiver);
            assumeTrue(fd >= 0, "--add-exports java.base/sun.nio.ch");

            // SOL_SOCKET and SO_RCVLOWAT: 999 bytes waiting do not make the socket readable under a mark of 1000.
            NativeSocket.setReceiveLowWater(fd, 1000);
            sender.write(ByteBuffer.allocate(999));
            // FIONREAD: the bytes that wait, once they are all there.
            for (int i = 0; i < 500 && NativeSocket.bytesQueued(fd) < 999; i++) Thread.sleep(10);
            assertThat(NativeSocket.bytesQueued(fd)).isEqualTo(999);
            assertThat(NativeSocket.poll(fd, false, 0)).as("readable below the low-water mark").isFalse();
            sender.write(ByteBuffer.allocate(1));
            assertThat(NativeSocket.poll(fd, false, 10_000)).as("readable at the low-water mark").isTrue();
            assertThat(NativeSocket.bytesQueued(fd)).isEqualTo(1000);

            // The epoll_event layout: the descriptor armed comes back where the layout says it is.
            int epfd = NativeSocket.epollCreate();
            try {
                assertThat(fcntl(epfd, F_GETFD) & FD_CLOEXEC).as("EPOLL_CLOEXEC set").isEqualTo(FD_CLOEXEC);
                NativeSocket.epollArmOnce(epfd, fd, NativeSocket.EPOLLIN);
                MemorySegment events = arena.allocate((long) NativeSocket.EPOLL_EVENT_SIZE * 4, 8);
                assertThat(NativeSocket.epollWait(epfd, events, 4)).isOne();
                assertThat(NativeSocket.epollEventFd(events, 0)).isEqualTo(fd);
            } finally {
                NativeIo.close(epfd);
            }
        }
    }

    @Test
    void theUnsentLimitStopsSendsThatThePeersWindowCannotTake() throws Throwable {
        current();
        // The peer does not read and its window is small: what a send queues beyond it stays unsent.
        long capped = queuedBeforeFull(16 << 10), uncapped = queuedBeforeFull(0);
        assertThat(capped).as("queued with TCP_NOTSENT_LOWAT 16K").isLessThan(256 << 10);
        assertThat(uncapped).as("queued with no cap, in a 1 MiB send buffer").isGreaterThan(512 << 10);
    }

    /** Bytes a non-blocking sender gets into the socket before it reports full, the peer reading nothing. */
    private static long queuedBeforeFull(int unsentLimit) throws Exception {
        try (ServerSocketChannel listener = ServerSocketChannel.open()) {
            listener.setOption(java.net.StandardSocketOptions.SO_RCVBUF, 4096); // inherited by the accepted peer
            listener.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            try (SocketChannel sender = SocketChannel.open(listener.getLocalAddress());
                 SocketChannel ignored = listener.accept()) {
                sender.setOption(java.net.StandardSocketOptions.SO_SNDBUF, 1 << 20);
                int fd = NativeSocket.fd(sender);
                assumeTrue(fd >= 0, "--add-exports java.base/sun.nio.ch");
                sender.configureBlocking(false);
                if (unsentLimit > 0) NativeSocket.setUnsentLimit(fd, unsentLimit);
                ByteBuffer chunk = ByteBuffer.allocateDirect(64 << 10);
                long total = 0;
                for (int i = 0; i < 1000; i++) {
                    long n = NativeSocket.sendNow(fd, new ByteBuffer[] {chunk.clear()});
                    if (n == 0) break;
                    total += n;
                }
                return total;
            }
        }
    }

    private static LinuxAbi current() {
        assumeTrue(LinuxAbi.CURRENT != null && NativeIo.AVAILABLE && NativeSocket.AVAILABLE,
            "Linux on an architecture in the table, with native access");
        return LinuxAbi.CURRENT;
    }

    private static int fcntl(int fd, int cmd) throws Throwable {
        Linker linker = Linker.nativeLinker();
        MethodHandle fcntl = linker.downcallHandle(linker.defaultLookup().find("fcntl").orElseThrow(),
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
        int r = (int) fcntl.invokeExact(fd, cmd);
        assertThat(r).as("fcntl(%d, %d)", fd, cmd).isNotNegative();
        return r;
    }
}
