package io.jnbd.server.filter;

import io.jnbd.server.backend.Backend.Trait;
import java.util.EnumSet;
import java.util.Set;

/** Which traits of its inner backend a filter keeps. */
final class Traits {
    private Traits() {}

    /**
     * For a filter that acts on every call (waits before it, or fails it) and implements the asynchronous calls so:
     * it keeps {@link Trait#ASYNC} where the inner has it, {@link Trait#DIRECT_IO} and {@link Trait#REMOTE} (they say
     * how buffers are laid out and where calls may wait, which it does not change), and drops {@link Trait#ZERO_COPY}
     * and {@link Trait#CACHED_READS} (sendfile and reads answered from the page cache would skip it) and {@link Trait#NEVER_BLOCKS} (it may wait, or the call it guards may).
     */
    static Set<Trait> throughEveryCall(Set<Trait> below) {
        EnumSet<Trait> out = EnumSet.noneOf(Trait.class);
        for (Trait t : below) {
            if (t == Trait.ASYNC || t == Trait.DIRECT_IO || t == Trait.REMOTE) out.add(t);
        }
        return out;
    }

    /**
     * For a filter configured to do nothing on some calls: where it leaves every call alone it keeps all of the inner's
     * traits; where it leaves reads alone and never waits, it keeps {@link Trait#ZERO_COPY} and {@link Trait#CACHED_READS} too (reads
     * sent from the page cache skip only code that would have passed them through) and {@link Trait#NEVER_BLOCKS}.
     */
    static Set<Trait> through(Set<Trait> below, boolean touchesAnyCall, boolean touchesReads, boolean waits) {
        if (!touchesAnyCall) return below;
        EnumSet<Trait> out = EnumSet.noneOf(Trait.class);
        out.addAll(throughEveryCall(below));
        if (!waits && below.contains(Trait.NEVER_BLOCKS)) out.add(Trait.NEVER_BLOCKS);
        if (!waits && !touchesReads && below.contains(Trait.ZERO_COPY)) out.add(Trait.ZERO_COPY);
        if (!waits && !touchesReads && below.contains(Trait.CACHED_READS)) out.add(Trait.CACHED_READS);
        return out;
    }
}
