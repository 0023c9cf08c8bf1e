package io.jnbd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.core.util.DefaultPrettyPrinter;
import com.fasterxml.jackson.core.util.Separators;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.PropertyNamingStrategies;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** {@link Json#line} prints what Jackson printed for the tools' records before it was written by hand. */
class JsonTest {

    record Inner(long minimum, int maximumPayload) {}

    record Outer(String uri, String description, long size, List<String> flags, Inner blockSize, boolean structuredReplies,
                 String tls, List<Inner> many, double ratio) {}

    /** The writer the tools used: snake_case keys, one line, a space after ':' and ','. */
    private static final ObjectMapper JACKSON = new ObjectMapper().setPropertyNamingStrategy(PropertyNamingStrategies.SNAKE_CASE);
    private static final DefaultPrettyPrinter ONE_LINE = new DefaultPrettyPrinter(Separators.createDefaultInstance()
            .withObjectFieldValueSpacing(Separators.Spacing.AFTER)
            .withObjectEntrySpacing(Separators.Spacing.AFTER)
            .withArrayValueSpacing(Separators.Spacing.AFTER)
            .withObjectEmptySeparator("")
            .withArrayEmptySeparator(""))
        .withObjectIndenter(new DefaultPrettyPrinter.NopIndenter())
        .withArrayIndenter(new DefaultPrettyPrinter.NopIndenter());

    private static String jackson(Object value) throws Exception {
        return JACKSON.writer(ONE_LINE).writeValueAsString(value);
    }

    @Test
    void recordsListsAndEveryKindOfCharacterAsJacksonWroteThem() throws Exception {
        Random r = new Random(3);
        for (int i = 0; i < 2000; i++) {
            StringBuilder text = new StringBuilder();
            for (int n = r.nextInt(12); n > 0; n--) {
                text.append(switch (r.nextInt(4)) {
                    case 0 -> (char) r.nextInt(0x20);
                    case 1 -> "\"\\/'".charAt(r.nextInt(4));
                    case 2 -> (char) (0x20 + r.nextInt(0x60));
                    default -> (char) (0xa0 + r.nextInt(0x3000));
                });
            }
            Outer o = new Outer("nbd://h/" + text, text.toString(), r.nextLong(), List.of(text.toString(), "SEND_FUA"),
                new Inner(r.nextInt(), r.nextInt()), r.nextBoolean(), r.nextBoolean() ? null : "TLSv1.3",
                i % 3 == 0 ? List.of() : List.of(new Inner(1, 2), new Inner(3, 4)), 0.5);
            assertThat(Json.line(o)).isEqualTo(jackson(o));
        }
        assertThat(Json.line(new Inner(0, 1))).isEqualTo("{\"minimum\": 0, \"maximum_payload\": 1}");
    }

    @Test
    void snakeCase() {
        assertThat(Json.snakeCase("dirtyBytes")).isEqualTo("dirty_bytes");
        assertThat(Json.snakeCase("uri")).isEqualTo("uri");
        assertThat(Json.snakeCase("baseAllocation")).isEqualTo("base_allocation");
    }
}
