package io.jnbd.client;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;

/**
 * The C library as {@link Splice} and {@link NativeSend} link it: one linker and lookup. Errno, where a call
 * captures it, goes into a segment of {@link Splice#CAPTURE} passed first. Linking is a restricted method:
 * where native access is denied it throws, and the callers keep to the JDK's own calls.
 */
final class Libc {
    private Libc() {}

    private static final Linker LINKER = Linker.nativeLinker();
    static final SymbolLookup LOOKUP = LINKER.defaultLookup();
    private static final Linker.Option CAPTURE_ERRNO = Linker.Option.captureCallState("errno");

    /** libc's {@code name}, its errno captured into the segment passed as the first argument. */
    static MethodHandle withErrno(String name, FunctionDescriptor descriptor) {
        return LINKER.downcallHandle(LOOKUP.find(name).orElseThrow(), descriptor, CAPTURE_ERRNO);
    }

    /** libc's {@code name}, for calls whose failure needs no reason. */
    static MethodHandle link(String name, FunctionDescriptor descriptor, Linker.Option... options) {
        return LINKER.downcallHandle(LOOKUP.find(name).orElseThrow(), descriptor, options);
    }
}
