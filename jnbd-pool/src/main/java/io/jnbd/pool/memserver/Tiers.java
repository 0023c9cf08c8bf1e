package io.jnbd.pool.memserver;

import static io.jnbd.pool.memserver.PageStore.PAGE;
import static io.jnbd.pool.memserver.PageTable.MISSING;
import static io.jnbd.pool.memserver.RamTier.NO_FRAME;

import io.jnbd.pool.memserver.PageTable.Stripe;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.concurrent.TimeUnit;
import java.util.function.LongPredicate;

/**
 * One page at a time across the two tiers: reads and writes that bring spilled pages back into RAM,
 * eviction to make room for them, and removal.
 *
 * <p><b>Locking.</b> Every use of a page's frame or slot happens under its stripe's lock, and a thread
 * holds at most one stripe lock at a time, so that I/O on different pages runs in parallel and nothing
 * global is locked on the path of a resident page. Eviction only tries the victim's lock: a locked page
 * may be in use right now, and is skipped. Getting a frame never happens with a stripe lock held; the page
 * is looked up again afterwards, and a frame that turns out not to be needed goes back. The free lists and
 * counters are leaves: nothing is locked while holding them. Hence no deadlock.
 *
 * <p><b>When no frame can be had</b> (the spill file is full too, or every candidate is in use), a spilled
 * page is read or written where it is, in the file. A page that does not exist yet has been counted by the
 * {@link Ledger}, and pages never outnumber frames plus slots, so for it a frame is always on its way: it
 * waits for one instead.
 */
final class Tiers implements AutoCloseable {
    /** A counted page always finds a frame; this long without one is a bug, not a full store. */
    private static final long FRAME_WAIT_NANOS = TimeUnit.SECONDS.toNanos(30);

    private final PageTable table;
    private final RamTier ram;
    private final SpillFile spill;
    private final Ledger ledger;
    private volatile boolean closed;

    /** {@code spill} null for a store without a disk tier. */
    Tiers(PageTable table, RamTier ram, SpillFile spill, Ledger ledger) {
        this.table = table;
        this.ram = ram;
        this.spill = spill;
        this.ledger = ledger;
    }

    int ramHolding() {
        return ram.holding();
    }

    int spillUsed() {
        return spill == null ? 0 : spill.used();
    }

    void write(long key, int inPage, MemorySegment in, ByteBuffer src, long inOffset, int n,
               Ledger.Reservation reserved) throws IOException {
        int frame = NO_FRAME;
        boolean noFrameToBeHad = false;
        try {
            while (true) {
                int where;
                Stripe stripe = lock(table.stripeOf(key));
                try {
                    where = stripe.get(key);
                    if (where >= 0) {
                        ram.copyIn(where, inPage, in, inOffset, n);
                        ram.touch(where);
                        return;
                    }
                    if (frame == NO_FRAME) frame = ram.takeFree();
                    if (where == MISSING) {
                        if (frame != NO_FRAME) {
                            reserved.useOne(PageStore.spaceOf(key));
                            ram.zeroAround(frame, inPage, n);
                            ram.copyIn(frame, inPage, in, inOffset, n);
                            install(stripe, key, frame);
                            frame = NO_FRAME;
                            return;
                        }
                        reserved.ensureOne();
                    } else if (frame != NO_FRAME) {
                        if (n < PAGE) spill.readPage(~where, ram.buffer(frame));
                        spill.free(~where);
                        ram.copyIn(frame, inPage, in, inOffset, n);
                        install(stripe, key, frame);
                        frame = NO_FRAME;
                        return;
                    } else if (noFrameToBeHad) {
                        spill.write(~where, inPage, src.slice(src.position() + (int) inOffset, n));
                        return;
                    }
                } finally {
                    stripe.unlock();
                }
                frame = frameFor(where == MISSING);
                noFrameToBeHad = frame == NO_FRAME;
            }
        } finally {
            if (frame != NO_FRAME) ram.giveBack(frame);
        }
    }

    void read(long key, int inPage, MemorySegment out, ByteBuffer dst, long outOffset, int n) throws IOException {
        int frame = NO_FRAME;
        boolean noFrameToBeHad = false;
        try {
            while (true) {
                Stripe stripe = lock(table.stripeOf(key));
                try {
                    int where = stripe.get(key);
                    if (where == MISSING) {
                        out.asSlice(outOffset, n).fill((byte) 0);
                        return;
                    }
                    if (where >= 0) {
                        ram.copyOut(where, inPage, out, outOffset, n);
                        ram.touch(where);
                        return;
                    }
                    if (frame == NO_FRAME) frame = ram.takeFree();
                    if (frame != NO_FRAME) {
                        spill.readPage(~where, ram.buffer(frame));
                        spill.free(~where);
                        install(stripe, key, frame);
                        ram.copyOut(frame, inPage, out, outOffset, n);
                        frame = NO_FRAME;
                        return;
                    }
                    if (noFrameToBeHad) {
                        spill.read(~where, inPage, dst.slice(dst.position() + (int) outOffset, n));
                        return;
                    }
                } finally {
                    stripe.unlock();
                }
                frame = frameFor(false);
                noFrameToBeHad = frame == NO_FRAME;
            }
        } finally {
            if (frame != NO_FRAME) ram.giveBack(frame);
        }
    }

    /** Zeroes part of a page where it is; a discard is no use of the page, so it stays as cold as it was. */
    void zero(long key, int inPage, int n) throws IOException {
        Stripe stripe = lock(table.stripeOf(key));
        try {
            int where = stripe.get(key);
            if (where >= 0) ram.zero(where, inPage, n);
            else if (where != MISSING) spill.zero(~where, inPage, n);
        } finally {
            stripe.unlock();
        }
    }

    boolean exists(long key) {
        Stripe stripe = lock(table.stripeOf(key));
        try {
            return stripe.get(key) != MISSING;
        } finally {
            stripe.unlock();
        }
    }

    void remove(long key) {
        Stripe stripe = lock(table.stripeOf(key));
        try {
            int where = stripe.remove(key);
            if (where != MISSING) forget(key, where);
        } finally {
            stripe.unlock();
        }
    }

    /** Removes every page whose key matches, one stripe at a time. */
    void removeAll(LongPredicate matches) {
        for (int i = 0; i < table.stripeCount(); i++) {
            Stripe stripe = lock(table.stripe(i));
            try {
                stripe.removeIf(matches, this::forget);
            } finally {
                stripe.unlock();
            }
        }
    }

    boolean anyMatch(LongPredicate matches) {
        for (int i = 0; i < table.stripeCount(); i++) {
            Stripe stripe = lock(table.stripe(i));
            try {
                if (stripe.anyMatch(matches)) return true;
            } finally {
                stripe.unlock();
            }
        }
        return false;
    }

    private void install(Stripe stripe, long key, int frame) {
        stripe.put(key, frame);
        ram.hold(frame, key);
    }

    /** Gives back the frame or slot of a page just taken out of the table, and its count. */
    private void forget(long key, int where) {
        if (where >= 0) {
            ram.release(where);
            ram.giveBack(where);
        } else {
            spill.free(~where);
        }
        ledger.removed(PageStore.spaceOf(key), 1);
    }

    private Stripe lock(Stripe stripe) {
        stripe.lock();
        if (closed) {
            stripe.unlock();
            throw new IllegalStateException("page store closed");
        }
        return stripe;
    }

    /**
     * A frame for a page about to come into RAM: a free one, else one CLOCK evicts to spill. With
     * {@code mustWait} (the page has been counted, so a frame exists or is on its way back from another
     * thread) it keeps trying; without, it returns {@link RamTier#NO_FRAME} and the caller uses the page
     * where it is. Called with no stripe lock held.
     */
    private int frameFor(boolean mustWait) throws IOException {
        long deadline = 0;
        while (true) {
            int frame = ram.takeFree();
            if (frame == NO_FRAME && spill != null && spill.hasFree()) frame = evictOne();
            if (frame != NO_FRAME || !mustWait) return frame;
            if (deadline == 0) deadline = System.nanoTime() + FRAME_WAIT_NANOS;
            else if (System.nanoTime() - deadline > 0) throw new IOException("no RAM frame came free in 30 s");
            Thread.yield();
        }
    }

    /**
     * Moves one page that CLOCK finds unused from RAM to a free spill slot and returns its frame, or
     * {@link RamTier#NO_FRAME} if two turns of the hand found none it could take, or no slot is free.
     */
    private int evictOne() throws IOException {
        for (int step = 0, steps = 2 * ram.frames() + 1; step < steps; step++) {
            int frame = ram.advanceHand();
            if (frame == NO_FRAME) continue;
            long key = ram.owner(frame);
            if (key == RamTier.FREE) continue;
            Stripe stripe = table.stripeOf(key);
            if (!stripe.tryLock()) continue; // in use right now
            try {
                if (closed) throw new IllegalStateException("page store closed");
                if (stripe.get(key) != frame) continue; // discarded or moved since the hand read its owner
                int slot = spill.take();
                if (slot == SpillFile.NO_SLOT) return NO_FRAME;
                try {
                    spill.writePage(slot, ram.buffer(frame));
                } catch (IOException | RuntimeException e) {
                    spill.free(slot);
                    throw e;
                }
                stripe.put(key, ~slot);
                ram.release(frame);
                return frame;
            } finally {
                stripe.unlock();
            }
        }
        return NO_FRAME;
    }

    /**
     * Frees all RAM and deletes the spill file once page operations in progress are done (by taking every
     * stripe lock); any that come later throw {@link IllegalStateException}.
     */
    @Override
    public void close() {
        synchronized (this) {
            if (closed) return;
            closed = true;
        }
        for (int i = 0; i < table.stripeCount(); i++) table.stripe(i).lock();
        try {
            if (spill != null) spill.close();
            ram.close();
        } finally {
            for (int i = 0; i < table.stripeCount(); i++) table.stripe(i).unlock();
        }
    }
}
