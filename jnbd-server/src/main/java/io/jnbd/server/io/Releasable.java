package io.jnbd.server.io;

import java.util.concurrent.atomic.AtomicInteger;

/** Something held until a send completes: a pooled buffer, or a share of one. */
public interface Releasable {
    void release();

    /** Splits one releasable among {@code holders}; the underlying one is released by the last of them. */
    static Releasable[] share(Releasable target, int holders) {
        AtomicInteger left = new AtomicInteger(holders);
        Releasable[] out = new Releasable[holders];
        for (int i = 0; i < holders; i++) {
            boolean[] done = new boolean[1];
            out[i] = () -> {
                if (done[0]) return;
                done[0] = true;
                if (left.decrementAndGet() == 0) target.release();
            };
        }
        return out;
    }
}
