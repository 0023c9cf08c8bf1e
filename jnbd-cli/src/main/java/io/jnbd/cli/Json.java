package io.jnbd.cli;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.util.DefaultPrettyPrinter;
import com.fasterxml.jackson.core.util.Separators;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.PropertyNamingStrategies;
import com.fasterxml.jackson.databind.node.ArrayNode;

/** The tools' {@code --json} output, written by Jackson: record components become snake_case keys. */
final class Json {
    private Json() {}

    private static final ObjectMapper MAPPER = new ObjectMapper()
        .setPropertyNamingStrategy(PropertyNamingStrategies.SNAKE_CASE);

    /**
     * One line, {@code {"key": value, "key": value}}: the layout the tools printed before Jackson wrote it, kept
     * for scripts that grep it rather than parse it.
     */
    private static final DefaultPrettyPrinter ONE_LINE = new DefaultPrettyPrinter(Separators.createDefaultInstance()
            .withObjectFieldValueSpacing(Separators.Spacing.AFTER)
            .withObjectEntrySpacing(Separators.Spacing.AFTER)
            .withArrayValueSpacing(Separators.Spacing.AFTER)
            .withObjectEmptySeparator("")
            .withArrayEmptySeparator(""))
        .withObjectIndenter(new DefaultPrettyPrinter.NopIndenter())
        .withArrayIndenter(new DefaultPrettyPrinter.NopIndenter());

    static String line(Object value) {
        try {
            return MAPPER.writer(ONE_LINE).writeValueAsString(value);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("a value the tools print that does not serialise", e);
        }
    }

    /** Several lines, indented: for documents of documents, such as the memory servers' status. */
    static String indented(JsonNode value) {
        try {
            return MAPPER.writerWithDefaultPrettyPrinter().writeValueAsString(value);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("a JSON tree that does not serialise", e);
        }
    }

    /** A JSON document as a tree, to be printed inside another. */
    static JsonNode parse(String document) throws JsonProcessingException {
        return MAPPER.readTree(document);
    }

    static ArrayNode array() {
        return MAPPER.createArrayNode();
    }

    static JsonNode tree(Object value) {
        return MAPPER.valueToTree(value);
    }
}
