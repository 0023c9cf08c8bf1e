package io.jnbd.server.filter.cow;

import io.jnbd.server.backend.Backend;
import io.jnbd.server.backend.ConnectionContext;
import io.jnbd.server.backend.NamedViews;
import java.io.IOException;
import java.util.List;
import java.util.Set;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code cow-overlay=client} and {@code identity}: a client opens {@code EXPORT/NAME} and writes to overlay NAME, made on
 * first use and kept across disconnects and restarts; every connection naming it shares it. With {@code identity} the
 * name is the client's TLS identity (its PSK identity, or the first name of its certificate): {@code EXPORT} alone
 * opens it, and {@code EXPORT/NAME} is refused unless NAME is one of the client's identities.
 *
 * <p>{@code EXPORT/NAME@ro} is overlay NAME as its client sees it, read-only, for a backup while the client runs: each
 * read holds the locks of its blocks, so it sees every block whole, as it is between the client's changes (flushed or
 * not). It never makes an overlay, and with {@code identity} it is the client's own, as NAME would be.
 *
 * <p>With {@code client}, {@code EXPORT} alone is the base, read-only: a tool that lists the server's exports and opens
 * each one ({@code nbdinfo --list}) must be able to open this one too, and the base is what every overlay starts from.
 */
final class NamedCowFilter extends CowFilter implements NamedViews {
    private static final Logger log = LoggerFactory.getLogger(NamedCowFilter.class);

    NamedCowFilter(Backend inner, CowStore store, Set<Capability> capabilities, Set<Trait> traits, int blockSize) {
        super(inner, store, capabilities, traits, blockSize);
    }

    /**
     * The overlay's name for a client that asked for {@code name} with {@code identities} (null: none, the base alone);
     * why not, as a refusal.
     */
    private String nameFor(String name, List<String> identities) throws Refusal {
        String chosen = isView(name) ? name.substring(0, name.length() - CowStore.READ_ONLY_VIEW.length()) : name;
        if (store.mode == CowStore.Mode.IDENTITY) {
            if (identities.isEmpty()) throw new Refusal("this export keeps an overlay for each TLS identity: connect with TLS and a client identity");
            if (name == null) chosen = identities.getFirst();
            else if (!identities.contains(chosen)) {
                throw new Refusal("overlay '" + chosen + "' is not this client's (its TLS identity is " + identities.getFirst() + ")");
            }
        } else if (name == null) {
            return null;
        }
        String bad = CowStore.nameRefusal(chosen);
        if (bad != null) throw new Refusal(bad);
        return chosen;
    }

    /** Also opens (or makes) the overlay, so that one that cannot be served is refused before the client has the export. */
    @Override
    public String refusal(String name, List<String> identities) {
        try {
            overlay(name, identities);
            return null;
        } catch (Refusal r) {
            if (store.mode == CowStore.Mode.IDENTITY && name != null && !identities.isEmpty()) {
                log.warn("a client with TLS identities {} asked for overlay '{}' of another: refused", identities, name);
            }
            return r.getMessage();
        } catch (IOException e) {
            return "overlay cannot be opened: " + e.getMessage();
        }
    }

    @Override
    Overlay overlayFor(ConnectionContext context) throws IOException {
        return overlay(context.name(), context.identities());
    }

    private Overlay overlay(String name, List<String> identities) throws IOException {
        String chosen = nameFor(name, identities);
        if (chosen == null) return null;
        return isView(name) ? store.existing(chosen) : store.named(chosen);
    }

    /** The base alone, read-only: {@code client} mode's {@code EXPORT} with no overlay named. */
    private boolean isBase(String name) {
        return name == null && store.mode == CowStore.Mode.CLIENT;
    }

    private static boolean isView(String name) {
        return name != null && name.endsWith(CowStore.READ_ONLY_VIEW);
    }

    @Override
    boolean viewOnly(ConnectionContext context) {
        return isView(context.name()) || isBase(context.name());
    }

    @Override
    public boolean readOnly(String name) {
        return isView(name) || isBase(name);
    }

    /** A client's request for an overlay it may not have. */
    private static final class Refusal extends IOException {
        Refusal(String message) {
            super(message, null);
        }
    }
}
