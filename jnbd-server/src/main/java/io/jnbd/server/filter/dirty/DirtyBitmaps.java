package io.jnbd.server.filter.dirty;

import java.io.IOException;
import java.util.List;

/**
 * What an operator does to an export's dirty bitmaps while it serves (the {@code dirty} filter implements it; the
 * control endpoint finds it with {@code FilterBackend.find(export.backend(), DirtyBitmaps.class)}). Every change is
 * atomic with respect to writes: a write that races with it marks its blocks either wholly before or wholly after,
 * and, once the call returns, the change is as durable as a flushed write.
 */
public interface DirtyBitmaps {
    /**
     * One bitmap. {@code recording}: writes mark it (false once frozen by {@link #rotate}). {@code dirtyBytes}: how
     * much of the export it reports dirty, a multiple of {@code granularity} (but the export's last block).
     */
    record Info(String name, boolean recording, long granularity, long dirtyBytes) {}

    /** The bitmaps of this export, in the order they were made. */
    List<Info> list();

    /** Makes a new recording bitmap, all clean. Fails if the name is taken or not a valid bitmap name. */
    void add(String name) throws IOException;

    /** Marks every block of the bitmap clean; it keeps recording if it was. */
    void clear(String name) throws IOException;

    /** Deletes the bitmap and its file. */
    void remove(String name) throws IOException;

    /**
     * Freezes {@code current} (it stops recording and keeps what it has) and starts {@code next}, new and clean, at
     * one instant: every write lands in exactly one of the two. The checkpoint of an incremental backup.
     */
    void rotate(String current, String next) throws IOException;
}
