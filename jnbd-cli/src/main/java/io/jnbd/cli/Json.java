package io.jnbd.cli;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.PropertyNamingStrategies;
import com.fasterxml.jackson.databind.node.ArrayNode;
import java.lang.reflect.RecordComponent;

/**
 * The tools' {@code --json} output: record components become snake_case keys. One-line records ({@link #line}) are
 * written here by hand, because Jackson's 550 classes, once in the client tools' AOT cache, would be loaded at every
 * tool's start (see AotTraining) and, out of it, cost {@code info --json} 0.2 s; the memory servers' status
 * documents, parsed and nested, go through Jackson.
 */
final class Json {
    private Json() {}

    /** Jackson, loaded by the first use of the methods that need it, not by {@link #line}. */
    private static final class Jackson {
        static final ObjectMapper MAPPER = new ObjectMapper().setPropertyNamingStrategy(PropertyNamingStrategies.SNAKE_CASE);
    }

    /**
     * One line, {@code {"key": value, "key": value}}, the layout scripts grep for: a record (its components in
     * order, their names in snake_case), a list, a string, a number, a boolean or null, nested.
     */
    static String line(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value);
        return out.toString();
    }

    private static void write(StringBuilder out, Object value) {
        switch (value) {
            case null -> out.append("null");
            case String text -> quote(out, text);
            case Number number -> out.append(number);
            case Boolean bool -> out.append(bool);
            case java.util.Collection<?> items -> {
                out.append('[');
                String sep = "";
                for (Object item : items) {
                    out.append(sep);
                    write(out, item);
                    sep = ", ";
                }
                out.append(']');
            }
            case Record record -> {
                out.append('{');
                String sep = "";
                for (RecordComponent c : record.getClass().getRecordComponents()) {
                    out.append(sep);
                    quote(out, snakeCase(c.getName()));
                    out.append(": ");
                    try {
                        write(out, c.getAccessor().invoke(record));
                    } catch (ReflectiveOperationException e) {
                        throw new IllegalStateException("a record the tools print whose " + c.getName() + " cannot be read", e);
                    }
                    sep = ", ";
                }
                out.append('}');
            }
            default -> throw new IllegalArgumentException("not a value the tools print as JSON: " + value.getClass());
        }
    }

    /** {@code dirtyBytes} as {@code dirty_bytes}. */
    static String snakeCase(String name) {
        StringBuilder b = new StringBuilder(name.length() + 4);
        for (int i = 0; i < name.length(); i++) {
            char ch = name.charAt(i);
            if (Character.isUpperCase(ch)) {
                if (i > 0) b.append('_');
                b.append(Character.toLowerCase(ch));
            } else {
                b.append(ch);
            }
        }
        return b.toString();
    }

    private static void quote(StringBuilder out, String text) {
        out.append('"');
        for (int i = 0; i < text.length(); i++) {
            char ch = text.charAt(i);
            switch (ch) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> {
                    if (ch < 0x20) out.append(String.format("\\u%04X", (int) ch));
                    else out.append(ch);
                }
            }
        }
        out.append('"');
    }

    /** Several lines, indented: for documents of documents, such as the memory servers' status. */
    static String indented(JsonNode value) {
        try {
            return Jackson.MAPPER.writerWithDefaultPrettyPrinter().writeValueAsString(value);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("a JSON tree that does not serialise", e);
        }
    }

    /** A JSON document as a tree, to be printed inside another. */
    static JsonNode parse(String document) throws JsonProcessingException {
        return Jackson.MAPPER.readTree(document);
    }

    static ArrayNode array() {
        return Jackson.MAPPER.createArrayNode();
    }

    static JsonNode tree(Object value) {
        return Jackson.MAPPER.valueToTree(value);
    }
}
