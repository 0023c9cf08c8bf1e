package io.jnbd.server.control;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.jnbd.server.filter.dirty.DirtyBitmaps;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * The control endpoint's wire format, version {@value #VERSION}: lines of UTF-8 JSON, each at most
 * {@value #MAX_LINE} bytes with its newline. On connect the server sends a greeting naming the version, or one
 * error line and closes (a peer that is neither the server's user nor root). Then each request line gets one reply
 * line, in order, until either side closes:
 *
 * <pre>
 * server  {"protocol":"jnbd-control","version":1}
 * client  {"op":"rotate","export":"vm0","bitmap":"b-monday","next":"b-tuesday"}
 * server  {"ok":true}
 * client  {"op":"list","export":"vm0"}
 * server  {"ok":true,"bitmaps":[{"name":"b-monday","recording":false,"granularity":65536,"dirty_bytes":1048576},...]}
 * client  {"op":"clear","export":"vm0","bitmap":"nope"}
 * server  {"ok":false,"error":"export 'vm0' has no bitmap 'nope' (its bitmaps: b-monday, b-tuesday)"}
 * </pre>
 *
 * A later version adds operations or keys; a server refuses keys it does not know rather than ignore them, so a
 * client never believes an option took effect that did not.
 */
public final class ControlProtocol {
    private ControlProtocol() {}

    public static final int VERSION = 1;
    public static final String NAME = "jnbd-control";
    /** Room for an export name of the spec's 4096 bytes, two bitmap names and the JSON around them. */
    public static final int MAX_LINE = 16 * 1024;

    private static final ObjectMapper JSON = new ObjectMapper();

    /** The operations, as {@code jnbd bitmap} names them. */
    public enum Op {
        LIST, ADD, CLEAR, REMOVE, ROTATE;

        public String word() {
            return name().toLowerCase(java.util.Locale.ROOT);
        }

        /** {@code list} reads; the others change what the server tracks. */
        public boolean changes() {
            return this != LIST;
        }
    }

    /** One request: {@code bitmap} for all but list, {@code next} for rotate only. */
    public record Request(Op op, String export, String bitmap, String next) {
        public static Request list(String export) {
            return new Request(Op.LIST, export, null, null);
        }

        public static Request of(Op op, String export, String bitmap) {
            return new Request(op, export, bitmap, null);
        }

        public static Request rotate(String export, String current, String next) {
            return new Request(Op.ROTATE, export, current, next);
        }
    }

    /** One reply: {@code error} null when it succeeded; {@code bitmaps} the answer to list, else null. */
    public record Reply(String error, List<DirtyBitmaps.Info> bitmaps) {
        public static Reply ok() {
            return new Reply(null, null);
        }

        public static Reply ok(List<DirtyBitmaps.Info> bitmaps) {
            return new Reply(null, List.copyOf(bitmaps));
        }

        public static Reply error(String message) {
            return new Reply(message, null);
        }

        public boolean succeeded() {
            return error == null;
        }
    }

    /** A line that is not a request of this version; the message says why, for the error reply. */
    public static final class BadLine extends Exception {
        public BadLine(String message) {
            super(message, null, false, false);
        }
    }

    public static String greeting() {
        ObjectNode n = JSON.createObjectNode().put("protocol", NAME).put("version", VERSION);
        return n.toString();
    }

    /** Checks a greeting line; the message says what is wrong with it (an error line, another version). */
    public static void checkGreeting(String line) throws BadLine {
        JsonNode n = parse(line);
        if (n.has("error")) throw new BadLine(n.path("error").asText());
        if (!NAME.equals(n.path("protocol").asText(null))) throw new BadLine("not a jnbd control endpoint: " + shorten(line));
        int v = n.path("version").asInt(-1);
        if (v != VERSION) throw new BadLine("the server speaks control protocol version " + v + ", this client " + VERSION);
    }

    private static final Set<String> REQUEST_KEYS = Set.of("op", "export", "bitmap", "next");

    public static String encode(Request r) {
        ObjectNode n = JSON.createObjectNode().put("op", r.op().word()).put("export", r.export());
        if (r.bitmap() != null) n.put("bitmap", r.bitmap());
        if (r.next() != null) n.put("next", r.next());
        return n.toString();
    }

    public static Request decodeRequest(String line) throws BadLine {
        JsonNode n = parse(line);
        for (var it = n.fieldNames(); it.hasNext(); ) {
            String key = it.next();
            if (!REQUEST_KEYS.contains(key)) throw new BadLine("unknown key '" + key + "' (a request has op, export, bitmap, next)");
        }
        String word = text(n, "op", true);
        Op op;
        try {
            op = Op.valueOf(word.toUpperCase(java.util.Locale.ROOT));
        } catch (IllegalArgumentException e) {
            throw new BadLine("unknown op '" + word + "' (list, add, clear, remove, rotate)");
        }
        String export = text(n, "export", true);
        String bitmap = text(n, "bitmap", op != Op.LIST);
        String next = text(n, "next", op == Op.ROTATE);
        if (op == Op.LIST && bitmap != null) throw new BadLine("list takes no bitmap");
        if (op != Op.ROTATE && next != null) throw new BadLine(word + " takes no next (only rotate does)");
        return new Request(op, export, bitmap, next);
    }

    public static String encode(Reply r) {
        ObjectNode n = JSON.createObjectNode();
        if (!r.succeeded()) return n.put("ok", false).put("error", r.error()).toString();
        n.put("ok", true);
        if (r.bitmaps() != null) {
            ArrayNode list = n.putArray("bitmaps");
            for (DirtyBitmaps.Info b : r.bitmaps()) {
                list.addObject().put("name", b.name()).put("recording", b.recording()).put("granularity", b.granularity())
                    .put("dirty_bytes", b.dirtyBytes());
            }
        }
        return n.toString();
    }

    public static Reply decodeReply(String line) throws BadLine {
        JsonNode n = parse(line);
        if (!n.path("ok").asBoolean(false)) {
            String error = n.path("error").asText(null);
            if (error == null) throw new BadLine("a reply that is neither ok nor an error: " + shorten(line));
            return Reply.error(error);
        }
        if (!n.has("bitmaps")) return Reply.ok();
        List<DirtyBitmaps.Info> out = new ArrayList<>();
        for (JsonNode b : n.path("bitmaps")) {
            out.add(new DirtyBitmaps.Info(b.path("name").asText(), b.path("recording").asBoolean(),
                b.path("granularity").asLong(), b.path("dirty_bytes").asLong()));
        }
        return Reply.ok(out);
    }

    private static JsonNode parse(String line) throws BadLine {
        JsonNode n;
        try {
            n = JSON.readTree(line);
        } catch (JsonProcessingException e) {
            throw new BadLine("not JSON: " + shorten(line));
        }
        if (n == null || !n.isObject()) throw new BadLine("not a JSON object: " + shorten(line));
        return n;
    }

    private static String text(JsonNode n, String key, boolean required) throws BadLine {
        JsonNode v = n.get(key);
        if (v == null || v.isNull()) {
            if (required) throw new BadLine("missing '" + key + "'");
            return null;
        }
        if (!v.isTextual()) throw new BadLine("'" + key + "' must be a string");
        if (v.asText().isEmpty()) throw new BadLine("'" + key + "' is empty");
        return v.asText();
    }

    /** What of a bad line an error message quotes: enough to recognise it, never a whole 16 KiB. */
    static String shorten(String line) {
        String oneLine = line.replaceAll("\\p{Cntrl}", "?");
        return oneLine.length() <= 80 ? oneLine : oneLine.substring(0, 80) + "...";
    }
}
