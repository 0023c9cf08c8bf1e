package io.jnbd.pool.memserver;

import static io.jnbd.pool.memserver.PageStore.PAGE;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * Who holds how many pages, in pages. A page is counted against the store's capacity (RAM frames plus
 * spill slots) and its client's quota from the moment a write reserves it, before the write copies
 * anything, until it is discarded or dropped: that is what lets a write fail whole instead of half done.
 * Where a page sits (RAM or spill) does not matter here; the tiers count that themselves.
 */
final class Ledger {
    private final long capacity;
    private final long quota;
    /** Pages that exist plus pages reserved by writes in progress. */
    private final AtomicLong committed = new AtomicLong();
    private final AtomicLongArray clients = new AtomicLongArray(1 << 16);
    /** Pages that exist, per space; a space with none has no entry. */
    private final ConcurrentHashMap<Integer, Long> spaces = new ConcurrentHashMap<>();

    /** {@code quota} in pages, {@link Long#MAX_VALUE} for none. */
    Ledger(long capacity, long quota) {
        this.capacity = capacity;
        this.quota = quota;
    }

    /**
     * Counts {@code pages} more against the client and the store, or throws and counts nothing. The quota
     * is checked first: when both limits refuse, the client's own is the one it can do something about.
     */
    private void reserve(int client, long pages) throws StoreFullException {
        if (pages == 0) return;
        long held;
        do {
            held = clients.get(client);
            if (held + pages > quota) {
                throw new StoreFullException(StoreFullException.Limit.CLIENT_QUOTA, client, "client " + client
                    + " holds " + held * PAGE + " bytes of its quota of " + quota * PAGE + " and needs "
                    + pages * PAGE + " more");
            }
        } while (!clients.compareAndSet(client, held, held + pages));
        long total;
        do {
            total = committed.get();
            if (total + pages > capacity) {
                clients.addAndGet(client, -pages);
                throw new StoreFullException(StoreFullException.Limit.CAPACITY, client, "store full: "
                    + pages * PAGE + " bytes needed, " + (capacity - total) * PAGE + " free of "
                    + capacity * PAGE + " in RAM and spill");
            }
        } while (!committed.compareAndSet(total, total + pages));
    }

    /** Pages one write has counted and not yet used; it counts more, one at a time, if it runs out. */
    final class Reservation implements AutoCloseable {
        private final int client;
        private long pages;

        private Reservation(int client, long pages) {
            this.client = client;
            this.pages = pages;
        }

        /** Makes sure one page is counted, so that waiting for a frame for it is waiting for a sure thing. */
        void ensureOne() throws StoreFullException {
            if (pages == 0) {
                // Only when a page counted as present was discarded meanwhile: the write can then fail
                // with part of it done, as it would had the discard come a moment later.
                reserve(client, 1);
                pages = 1;
            }
        }

        /** A counted page of {@code space} now exists. */
        void useOne(int space) throws StoreFullException {
            ensureOne();
            pages--;
            spaces.merge(space, 1L, Long::sum);
        }

        /** Gives back what the write did not use: a page counted as missing may have been written meanwhile. */
        @Override
        public void close() {
            unreserve(client, pages);
            pages = 0;
        }
    }

    /** Counts {@code pages} for a write of {@code client}, or throws and counts nothing. */
    Reservation reservation(int client, long pages) throws StoreFullException {
        reserve(client, pages);
        return new Reservation(client, pages);
    }

    private void unreserve(int client, long pages) {
        if (pages == 0) return;
        clients.addAndGet(client, -pages);
        committed.addAndGet(-pages);
    }

    /** Pages of {@code space} are gone, and so are their reservations. */
    void removed(int space, long pages) {
        spaces.merge(space, -pages, (a, b) -> a + b == 0 ? null : a + b);
        unreserve(PageStore.clientOf(space), pages);
    }

    long clientPages(int client) {
        return clients.get(client);
    }

    long spacePages(int space) {
        return spaces.getOrDefault(space, 0L);
    }

    long committed() {
        return committed.get();
    }

    long free() {
        return capacity - committed.get();
    }

    Map<Integer, Long> spaces() {
        return new HashMap<>(spaces);
    }
}
