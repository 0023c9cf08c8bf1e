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
 */
final class NamedCowFilter extends CowFilter implements NamedViews {
    private static final Logger log = LoggerFactory.getLogger(NamedCowFilter.class);

    NamedCowFilter(Backend inner, CowStore store, Set<Capability> capabilities, Set<Trait> traits, int blockSize) {
        super(inner, store, capabilities, traits, blockSize);
    }

    /** The overlay's name for a client that asked for {@code name} with {@code identities}; why not, as a refusal. */
    private String nameFor(String name, List<String> identities) throws Refusal {
        String chosen = name;
        if (store.mode == CowStore.Mode.IDENTITY) {
            if (identities.isEmpty()) throw new Refusal("this export keeps an overlay for each TLS identity: connect with TLS and a client identity");
            if (name == null) chosen = identities.getFirst();
            else if (!identities.contains(name)) {
                throw new Refusal("overlay '" + name + "' is not this client's (its TLS identity is " + identities.getFirst() + ")");
            }
        } else if (name == null) {
            throw new Refusal("this export keeps an overlay for each client: open EXPORT/NAME, NAME naming the client's overlay");
        }
        String bad = CowStore.nameRefusal(chosen);
        if (bad != null) throw new Refusal(bad);
        return chosen;
    }

    /** Also opens (or makes) the overlay, so that one that cannot be served is refused before the client has the export. */
    @Override
    public String refusal(String name, List<String> identities) {
        try {
            store.named(nameFor(name, identities));
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
        return store.named(nameFor(context.name(), context.identities()));
    }

    /** A client's request for an overlay it may not have. */
    private static final class Refusal extends IOException {
        Refusal(String message) {
            super(message, null);
        }
    }
}
