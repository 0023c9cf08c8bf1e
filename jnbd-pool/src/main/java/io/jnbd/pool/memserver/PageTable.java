package io.jnbd.pool.memserver;

import java.util.concurrent.locks.ReentrantLock;
import java.util.function.LongPredicate;

/**
 * Where every page lives, keyed by {@link PageStore#key}: a RAM frame (a location {@code >= 0}) or a spill
 * slot ({@code ~slot}, so negative). The keys are spread over stripes, each with its own lock and its own
 * open-addressing table, so that threads working on different pages rarely meet on a lock and no boxed
 * entry exists per page: a table slot is 12 bytes and tables are kept between 1/8 and 3/4 full, so a page
 * costs 16 to 32 bytes here in the common case.
 *
 * <p>A stripe's lock guards more than its table: whoever holds it may use the RAM frame or spill slot of
 * any page of the stripe, and nobody else may (see {@link PageStore}).
 */
final class PageTable {
    /** The location of a page that has none. */
    static final int MISSING = Integer.MIN_VALUE;

    private final Stripe[] stripes;
    private final int stripeShift;

    PageTable(int stripeCount) {
        if (Integer.bitCount(stripeCount) != 1) throw new IllegalArgumentException("stripes must be a power of two");
        stripes = new Stripe[stripeCount];
        for (int i = 0; i < stripeCount; i++) stripes[i] = new Stripe();
        stripeShift = 64 - Integer.numberOfTrailingZeros(stripeCount);
    }

    /** The stripe from the hash's high bits; the table slot inside it comes from its low bits. */
    Stripe stripeOf(long key) {
        return stripeShift == 64 ? stripes[0] : stripes[(int) (mix(key) >>> stripeShift)];
    }

    int stripeCount() {
        return stripes.length;
    }

    Stripe stripe(int i) {
        return stripes[i];
    }

    /** The splitmix64 finalizer: consecutive page indexes of one space land on unrelated stripes and slots. */
    static long mix(long key) {
        long z = (key ^ (key >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }

    /** Told of pages (by a bulk removal, of each one it takes out) while their stripe is locked. */
    @FunctionalInterface
    interface Visitor {
        void page(long key, int location);
    }

    /**
     * One lock and a linear-probing table. Deletion shifts later entries back instead of leaving tombstones,
     * so a table that pages come and go through never fills with dead slots.
     */
    static final class Stripe extends ReentrantLock {
        private static final long EMPTY = -1; // keys are never negative
        private static final int MIN_CAPACITY = 16;

        private long[] keys = newKeys(MIN_CAPACITY);
        private int[] locations = new int[MIN_CAPACITY];
        private int size;

        private static long[] newKeys(int capacity) {
            long[] k = new long[capacity];
            java.util.Arrays.fill(k, EMPTY);
            return k;
        }

        int size() {
            return size;
        }

        int get(long key) {
            int mask = keys.length - 1;
            for (int i = (int) mix(key) & mask; ; i = (i + 1) & mask) {
                long k = keys[i];
                if (k == key) return locations[i];
                if (k == EMPTY) return MISSING;
            }
        }

        void put(long key, int location) {
            if ((size + 1) * 4L > keys.length * 3L) rehash(keys.length * 2);
            int mask = keys.length - 1;
            for (int i = (int) mix(key) & mask; ; i = (i + 1) & mask) {
                long k = keys[i];
                if (k == key) {
                    locations[i] = location;
                    return;
                }
                if (k == EMPTY) {
                    keys[i] = key;
                    locations[i] = location;
                    size++;
                    return;
                }
            }
        }

        /** Removes the page and returns where it was, or {@link #MISSING}. */
        int remove(long key) {
            int mask = keys.length - 1;
            int i = (int) mix(key) & mask;
            while (keys[i] != key) {
                if (keys[i] == EMPTY) return MISSING;
                i = (i + 1) & mask;
            }
            int location = locations[i];
            // Close the gap: an entry further along the run moves into it unless that would put it
            // before its home slot, where lookups starting at home would no longer reach it.
            for (int j = (i + 1) & mask; keys[j] != EMPTY; j = (j + 1) & mask) {
                int home = (int) mix(keys[j]) & mask;
                if (((j - home) & mask) >= ((j - i) & mask)) {
                    keys[i] = keys[j];
                    locations[i] = locations[j];
                    i = j;
                }
            }
            keys[i] = EMPTY;
            size--;
            if (size * 8L < keys.length && keys.length > MIN_CAPACITY) rehash(keys.length / 2);
            return location;
        }

        /** Removes every page whose key matches, telling {@code removed} of each. */
        void removeIf(LongPredicate matches, Visitor removed) {
            long[] oldKeys = keys;
            int[] oldLocations = locations;
            int kept = 0;
            for (long k : oldKeys) if (k != EMPTY && !matches.test(k)) kept++;
            if (kept == size) return;
            keys = newKeys(capacityFor(kept));
            locations = new int[keys.length];
            size = 0;
            for (int i = 0; i < oldKeys.length; i++) {
                long k = oldKeys[i];
                if (k == EMPTY) continue;
                if (matches.test(k)) removed.page(k, oldLocations[i]);
                else put(k, oldLocations[i]);
            }
        }

        boolean anyMatch(LongPredicate matches) {
            for (long k : keys) if (k != EMPTY && matches.test(k)) return true;
            return false;
        }

        /** Calls {@code each} for every page; the stripe must stay locked meanwhile. */
        void forEach(Visitor each) {
            for (int i = 0; i < keys.length; i++) if (keys[i] != EMPTY) each.page(keys[i], locations[i]);
        }

        private static int capacityFor(int entries) {
            int capacity = MIN_CAPACITY;
            while (entries * 2L > capacity) capacity *= 2; // load at most 1/2 after a rebuild
            return capacity;
        }

        private void rehash(int capacity) {
            long[] oldKeys = keys;
            int[] oldLocations = locations;
            keys = newKeys(capacity);
            locations = new int[capacity];
            size = 0;
            for (int i = 0; i < oldKeys.length; i++) if (oldKeys[i] != EMPTY) put(oldKeys[i], oldLocations[i]);
        }
    }
}
