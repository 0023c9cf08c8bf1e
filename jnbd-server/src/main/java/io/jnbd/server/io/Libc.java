package io.jnbd.server.io;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;

/**
 * The C library as {@link NativeIo} and {@link NativeSocket} call it: one linker and lookup, and errno captured
 * the same way for every call (into a segment of {@link #CAPTURE_LAYOUT} passed first), read by {@link #errno}.
 * Linking where there is no native access fails (with --illegal-native-access=deny): the callers catch that
 * and keep to the JDK's own calls.
 */
final class Libc {
    private Libc() {}

    static final StructLayout CAPTURE_LAYOUT = Linker.Option.captureStateLayout();
    /** struct iovec on LP64. */
    static final StructLayout IOVEC = MemoryLayout.structLayout(ValueLayout.ADDRESS.withName("base"), ValueLayout.JAVA_LONG.withName("len"));
    private static final VarHandle ERRNO = CAPTURE_LAYOUT.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final Linker LINKER = Linker.nativeLinker();
    private static final SymbolLookup LOOKUP = LINKER.defaultLookup();
    private static final Linker.Option CAPTURE_ERRNO = Linker.Option.captureCallState("errno");

    /** libc's {@code name}, its errno captured into the segment passed as the first argument. */
    static MethodHandle withErrno(String name, FunctionDescriptor descriptor, Linker.Option... more) {
        Linker.Option[] options = new Linker.Option[more.length + 1];
        options[0] = CAPTURE_ERRNO;
        System.arraycopy(more, 0, options, 1, more.length);
        return LINKER.downcallHandle(LOOKUP.find(name).orElseThrow(), descriptor, options);
    }

    /** libc's {@code name}, for calls whose failure needs no reason. */
    static MethodHandle plain(String name, FunctionDescriptor descriptor) {
        return LINKER.downcallHandle(LOOKUP.find(name).orElseThrow(), descriptor);
    }

    /** Whether the C library has every one of {@code names}: a symbol lookup, far cheaper than linking them. */
    static boolean allFound(String... names) {
        for (String name : names) {
            if (LOOKUP.find(name).isEmpty()) return false;
        }
        return true;
    }

    static int errno(MemorySegment state) {
        return (int) ERRNO.get(state, 0L);
    }
}
