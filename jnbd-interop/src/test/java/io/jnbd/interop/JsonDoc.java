package io.jnbd.interop;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small JSON reader for the status documents the pool's exports serve (objects nested in arrays, which
 * {@link NbdinfoJson}'s patterns cannot take apart). Objects become maps, arrays lists, numbers Long or Double.
 * Written here rather than borrowed from jnbd, so that the tests read what the server wrote, not what its own
 * library agrees with.
 */
final class JsonDoc {

    private final String text;
    private int pos;

    private JsonDoc(String text) {
        this.text = text;
    }

    /** Parses one JSON value; what follows it may only be whitespace or NUL padding. */
    static Object parse(String text) {
        JsonDoc p = new JsonDoc(text);
        Object value = p.value();
        while (p.pos < text.length() && (Character.isWhitespace(text.charAt(p.pos)) || text.charAt(p.pos) == 0)) p.pos++;
        if (p.pos != text.length()) throw p.error("trailing text");
        return value;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> object(String text) {
        Object value = parse(text);
        if (!(value instanceof Map)) throw new IllegalArgumentException("not a JSON object: " + text);
        return (Map<String, Object>) value;
    }

    private Object value() {
        skipSpace();
        if (pos >= text.length()) throw error("a value");
        char c = text.charAt(pos);
        return switch (c) {
            case '{' -> object();
            case '[' -> array();
            case '"' -> string();
            case 't' -> literal("true", Boolean.TRUE);
            case 'f' -> literal("false", Boolean.FALSE);
            case 'n' -> literal("null", null);
            default -> number();
        };
    }

    private Map<String, Object> object() {
        Map<String, Object> map = new LinkedHashMap<>();
        pos++; // {
        skipSpace();
        if (peek() == '}') {
            pos++;
            return map;
        }
        while (true) {
            skipSpace();
            String key = string();
            skipSpace();
            expect(':');
            map.put(key, value());
            skipSpace();
            if (peek() == ',') {
                pos++;
                continue;
            }
            expect('}');
            return map;
        }
    }

    private List<Object> array() {
        List<Object> list = new ArrayList<>();
        pos++; // [
        skipSpace();
        if (peek() == ']') {
            pos++;
            return list;
        }
        while (true) {
            list.add(value());
            skipSpace();
            if (peek() == ',') {
                pos++;
                continue;
            }
            expect(']');
            return list;
        }
    }

    private String string() {
        expect('"');
        StringBuilder out = new StringBuilder();
        while (true) {
            if (pos >= text.length()) throw error("the end of a string");
            char c = text.charAt(pos++);
            if (c == '"') return out.toString();
            if (c != '\\') {
                out.append(c);
                continue;
            }
            char e = text.charAt(pos++);
            switch (e) {
                case 'n' -> out.append('\n');
                case 't' -> out.append('\t');
                case 'r' -> out.append('\r');
                case 'b' -> out.append('\b');
                case 'f' -> out.append('\f');
                case 'u' -> {
                    out.append((char) Integer.parseInt(text.substring(pos, pos + 4), 16));
                    pos += 4;
                }
                default -> out.append(e); // \" \\ \/
            }
        }
    }

    private Object literal(String word, Object value) {
        if (!text.startsWith(word, pos)) throw error(word);
        pos += word.length();
        return value;
    }

    private Object number() {
        int start = pos;
        while (pos < text.length() && "+-0123456789.eE".indexOf(text.charAt(pos)) >= 0) pos++;
        String n = text.substring(start, pos);
        if (n.isEmpty()) throw error("a value");
        return n.contains(".") || n.contains("e") || n.contains("E") ? (Object) Double.valueOf(n) : (Object) Long.valueOf(n);
    }

    private void skipSpace() {
        while (pos < text.length() && Character.isWhitespace(text.charAt(pos))) pos++;
    }

    private char peek() {
        return pos < text.length() ? text.charAt(pos) : '\0';
    }

    private void expect(char c) {
        if (peek() != c) throw error("'" + c + "'");
        pos++;
    }

    private IllegalArgumentException error(String expected) {
        return new IllegalArgumentException("JSON: expected " + expected + " at " + pos + " of: "
            + text.substring(0, Math.min(text.length(), 4000)));
    }
}
