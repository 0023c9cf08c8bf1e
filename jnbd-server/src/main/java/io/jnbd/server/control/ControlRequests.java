package io.jnbd.server.control;

import io.jnbd.server.Export;
import io.jnbd.server.ExportRegistry;
import io.jnbd.server.backend.FilterBackend;
import io.jnbd.server.control.ControlProtocol.Reply;
import io.jnbd.server.control.ControlProtocol.Request;
import io.jnbd.server.filter.dirty.DirtyBitmaps;
import io.jnbd.server.net.UnixPeer;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Carries out one control request on the exports as the registry has them now (after a reload, the new set), and
 * logs who changed what. The names are checked here first so that an error names the bitmaps that exist; the
 * dirty filter checks again under its own lock, and its refusal is what a race meets.
 */
final class ControlRequests {
    private static final Logger log = LoggerFactory.getLogger(ControlRequests.class);

    private final ExportRegistry exports;

    ControlRequests(ExportRegistry exports) {
        this.exports = exports;
    }

    Reply handle(Request r, UnixPeer who) {
        Export export;
        try {
            export = exports.find(r.export());
        } catch (ExportRegistry.Refused e) {
            export = null;
        }
        if (export == null) return Reply.error("no export '" + r.export() + "' (exports: " + exportNames() + ")");
        DirtyBitmaps bitmaps = FilterBackend.find(export.backend(), DirtyBitmaps.class);
        if (bitmaps == null) {
            return Reply.error("export '" + export.name() + "' has no dirty filter (serve it with filter=dirty,dirty-bitmap=NAME)");
        }
        String at = "export '" + export.name() + "'";
        try {
            List<DirtyBitmaps.Info> now = bitmaps.list();
            String refused = checkNames(r, now, at);
            if (refused != null) return refusedChange(r, who, refused);
            switch (r.op()) {
                case LIST -> {
                    return Reply.ok(now);
                }
                case ADD -> bitmaps.add(r.bitmap());
                case CLEAR -> bitmaps.clear(r.bitmap());
                case REMOVE -> bitmaps.remove(r.bitmap());
                case ROTATE -> bitmaps.rotate(r.bitmap(), r.next());
            }
        } catch (IOException | RuntimeException e) {
            String message = e.getMessage() != null ? e.getMessage() : e.toString();
            return refusedChange(r, who, at + ": " + r.op().word() + " failed: " + message);
        }
        log.info("control: {} {}", who, done(r, at));
        return Reply.ok();
    }

    /** Why the names of {@code r} do not fit the bitmaps there are, or null when they do. */
    private static String checkNames(Request r, List<DirtyBitmaps.Info> now, String at) {
        List<String> names = new ArrayList<>();
        for (DirtyBitmaps.Info i : now) names.add(i.name());
        String existing = names.isEmpty() ? "it has none" : "its bitmaps: " + String.join(", ", names);
        return switch (r.op()) {
            case LIST -> null;
            case ADD -> names.contains(r.bitmap()) ? at + " already has a bitmap '" + r.bitmap() + "'" : null;
            case CLEAR, REMOVE -> names.contains(r.bitmap()) ? null : at + " has no bitmap '" + r.bitmap() + "' (" + existing + ")";
            case ROTATE -> {
                if (!names.contains(r.bitmap())) yield at + " has no bitmap '" + r.bitmap() + "' (" + existing + ")";
                if (r.next().equals(r.bitmap()) || names.contains(r.next())) yield at + " already has a bitmap '" + r.next() + "'";
                yield null;
            }
        };
    }

    /** A change asked for and not made is logged too: an operator's script that keeps failing should show. */
    private static Reply refusedChange(Request r, UnixPeer who, String why) {
        if (r.op().changes()) log.info("control: {} asked to {} and was refused: {}", who, r.op().word(), why);
        return Reply.error(why);
    }

    private static String done(Request r, String at) {
        return switch (r.op()) {
            case LIST -> "listed the bitmaps of " + at;
            case ADD -> "added bitmap '" + r.bitmap() + "' to " + at;
            case CLEAR -> "cleared bitmap '" + r.bitmap() + "' of " + at;
            case REMOVE -> "removed bitmap '" + r.bitmap() + "' of " + at;
            case ROTATE -> "rotated " + at + ": bitmap '" + r.bitmap() + "' frozen, '" + r.next() + "' recording";
        };
    }

    private String exportNames() {
        List<String> names = new ArrayList<>();
        for (Export e : exports.listed()) names.add(e.name());
        return names.isEmpty() ? "none" : String.join(", ", names);
    }
}
