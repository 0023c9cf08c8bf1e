package io.jnbd.server.io;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/**
 * {@link NativeSocket}'s C functions, each linked on first use by a holder class of its own: the JVM initialises
 * it once, under its lock, and the JIT treats its handle as a constant. Linking a function costs a generated
 * stub, 5-10 ms at start-up, which a process that never calls it should not pay. Touched only where
 * {@link NativeSocket#AVAILABLE} is true.
 */
final class SocketCalls {
    private SocketCalls() {}

    private static final ValueLayout I = ValueLayout.JAVA_INT, L = ValueLayout.JAVA_LONG, A = ValueLayout.ADDRESS;

    static final class Send {
        static final MethodHandle H = Libc.withErrno("send", FunctionDescriptor.of(L, I, A, L, I));
    }

    static final class Sendfile {
        static final MethodHandle H = Libc.withErrno("sendfile", FunctionDescriptor.of(L, I, I, A, L));
    }

    static final class Sendmsg {
        static final MethodHandle H = Libc.withErrno("sendmsg", FunctionDescriptor.of(L, I, A, I));
    }

    static final class Recv {
        static final MethodHandle H = Libc.withErrno("recv", FunctionDescriptor.of(L, I, A, L, I));
    }

    static final class Setsockopt {
        static final MethodHandle H = Libc.withErrno("setsockopt", FunctionDescriptor.of(I, I, I, I, A, I));
    }

    static final class Getsockopt {
        static final MethodHandle H = Libc.withErrno("getsockopt", FunctionDescriptor.of(I, I, I, I, A, A));
    }

    static final class Geteuid {
        static final MethodHandle H = Libc.plain("geteuid", FunctionDescriptor.of(I));
    }

    static final class Poll {
        static final MethodHandle H = Libc.withErrno("poll", FunctionDescriptor.of(I, A, L, I));
    }

    static final class Ioctl {
        static final MethodHandle H = Libc.withErrno("ioctl", FunctionDescriptor.of(I, I, L, A), Linker.Option.firstVariadicArg(2));
    }

    static final class EpollCreate1 {
        static final MethodHandle H = Libc.withErrno("epoll_create1", FunctionDescriptor.of(I, I));
    }

    static final class EpollCtl {
        static final MethodHandle H = Libc.withErrno("epoll_ctl", FunctionDescriptor.of(I, I, I, I, A));
    }

    static final class EpollWait {
        static final MethodHandle H = Libc.withErrno("epoll_wait", FunctionDescriptor.of(I, I, A, I, I));
    }

    /**
     * send and recv that may be handed a heap array, pinned for the call rather than copied: both never wait
     * (MSG_DONTWAIT), which is what a critical call must promise. TLS records live in heap buffers (see
     * {@code io.jnbd.tls.JdkSecureChannel}), tens of KiB at a time; without these each would be copied to
     * native memory and back. Null where the JDK refuses the option.
     */
    static final class SendHeap {
        static final MethodHandle H = pinning("send");
    }

    static final class RecvHeap {
        static final MethodHandle H = pinning("recv");
    }

    private static MethodHandle pinning(String name) {
        try {
            return Libc.withErrno(name, FunctionDescriptor.of(L, I, A, L, I), Linker.Option.critical(true));
        } catch (RuntimeException e) {
            return null; // heap buffers are copied instead
        }
    }
}
