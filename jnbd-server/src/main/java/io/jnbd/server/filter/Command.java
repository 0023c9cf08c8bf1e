package io.jnbd.server.filter;

import java.util.Locale;

/**
 * The backend calls a filter can single out, each with the word nbdkit's filters use for it in their keys: the delay
 * filter says {@code delay-read}, the error filter {@code error-pread} (both after nbdkit's names).
 */
enum Command {
    READ("read", "pread"), WRITE("write", "pwrite"), ZERO("zero", "zero"), TRIM("trim", "trim"),
    EXTENTS("extents", "extents"), CACHE("cache", "cache"), FLUSH("flush", "flush");

    /** The word in the delay filter's key, {@code delay-read}. */
    final String delayWord;
    /** The word in the error filter's keys, {@code error-pread}. */
    final String errorWord;

    Command(String delayWord, String errorWord) {
        this.delayWord = delayWord;
        this.errorWord = errorWord;
    }

    @Override
    public String toString() {
        return name().toLowerCase(Locale.ROOT);
    }
}
