package io.jnbd.server.control;

import io.jnbd.server.backend.FilterForTests;
import io.jnbd.server.backend.MemoryBackend;
import io.jnbd.server.filter.dirty.DirtyBitmaps;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * A filter that keeps {@link DirtyBitmaps} as a list in memory and marks nothing: what the control endpoint is tested
 * against while the dirty filter is built elsewhere. A name starting with {@code fail} makes the call throw, as a
 * filter whose disk refuses a write would.
 */
public final class FakeDirtyBitmaps extends FilterForTests implements DirtyBitmaps {
    private final List<Info> bitmaps = new ArrayList<>();
    /** When set, add() of a name starting with "slow" counts {@code entered} down and waits for {@code gate}. */
    volatile java.util.concurrent.CountDownLatch entered, gate;

    public FakeDirtyBitmaps() {
        super(new MemoryBackend(1 << 20));
    }

    /** Pretends {@code bytes} were written while {@code name} recorded. */
    public synchronized void dirty(String name, long bytes) {
        int i = indexOf(name);
        Info b = bitmaps.get(i);
        bitmaps.set(i, new Info(b.name(), b.recording(), b.granularity(), b.dirtyBytes() + bytes));
    }

    @Override
    public synchronized List<Info> list() {
        return List.copyOf(bitmaps);
    }

    @Override
    public void add(String name) throws IOException {
        if (name.startsWith("slow") && gate != null) {
            entered.countDown();
            try {
                gate.await();
            } catch (InterruptedException e) {
                throw new IOException("interrupted", e);
            }
        }
        addNow(name);
    }

    private synchronized void addNow(String name) throws IOException {
        failIfAsked(name);
        if (indexOf(name) >= 0) throw new IllegalArgumentException("bitmap '" + name + "' exists");
        bitmaps.add(new Info(name, true, 65536, 0));
    }

    @Override
    public synchronized void clear(String name) throws IOException {
        failIfAsked(name);
        Info b = bitmaps.get(indexOf(name));
        bitmaps.set(indexOf(name), new Info(name, b.recording(), b.granularity(), 0));
    }

    @Override
    public synchronized void remove(String name) throws IOException {
        failIfAsked(name);
        bitmaps.remove(indexOf(name));
    }

    @Override
    public synchronized void rotate(String current, String next) throws IOException {
        failIfAsked(next);
        Info b = bitmaps.get(indexOf(current));
        bitmaps.set(indexOf(current), new Info(current, false, b.granularity(), b.dirtyBytes()));
        bitmaps.add(new Info(next, true, b.granularity(), 0));
    }

    private int indexOf(String name) {
        for (int i = 0; i < bitmaps.size(); i++) if (bitmaps.get(i).name().equals(name)) return i;
        return -1;
    }

    private static void failIfAsked(String name) throws IOException {
        if (name.startsWith("fail")) throw new IOException("No space left on device");
    }
}
