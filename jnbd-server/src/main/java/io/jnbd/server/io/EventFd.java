package io.jnbd.server.io;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/**
 * An eventfd: a descriptor that a thread waiting in epoll can be woken by, as the poll threads of
 * {@code io.jnbd.server.net.Poller} are when the process exits. Each call is linked on first use, as in {@link NativeIo}.
 */
public final class EventFd {
    private EventFd() {}

    private static final int EFD_NONBLOCK = 0x800, EFD_CLOEXEC = 0x80000;

    private static final class Create {
        static final MethodHandle EVENTFD = Libc.withErrno("eventfd", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
    }

    private static final class Write {
        static final MethodHandle EVENTFD_WRITE = Libc.withErrno("eventfd_write", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_LONG));
    }

    /** A new eventfd, non-blocking, closed on exec. */
    public static int create() throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Libc.CAPTURE_LAYOUT);
            int fd = (int) Create.EVENTFD.invokeExact(state, 0, EFD_NONBLOCK | EFD_CLOEXEC);
            if (fd < 0) throw new NativeIo.ErrnoException("eventfd", Libc.errno(state));
            return fd;
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("eventfd", t);
        }
    }

    /** Makes {@code fd} readable: whoever waits for it in epoll wakes. */
    public static void signal(int fd) throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(Libc.CAPTURE_LAYOUT);
            int r = (int) Write.EVENTFD_WRITE.invokeExact(state, fd, 1L);
            if (r < 0) throw new NativeIo.ErrnoException("eventfd_write", Libc.errno(state));
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("eventfd_write", t);
        }
    }
}
