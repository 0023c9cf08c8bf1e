package io.jnbd.interop;

import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The few fields of {@code nbdinfo --json} output for ONE export that the tests read.
 * nbdinfo prints flat {@code "key": value} pairs, so a pattern is enough; no JSON library needed.
 */
record NbdinfoJson(String text) {

    Boolean bool(String key) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(key) + "\"\\s*:\\s*(true|false)").matcher(text);
        return m.find() ? Boolean.valueOf(m.group(1)) : null;
    }

    Long number(String key) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(key) + "\"\\s*:\\s*(\\d+)").matcher(text);
        return m.find() ? Long.valueOf(m.group(1)) : null;
    }

    String string(String key) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(key) + "\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"").matcher(text);
        return m.find() ? m.group(1) : null;
    }

    /** The meta contexts listed under "contexts". */
    List<String> contexts() {
        Matcher m = Pattern.compile("\"contexts\"\\s*:\\s*\\[([^\\]]*)\\]").matcher(text);
        List<String> result = new ArrayList<>();
        if (m.find()) {
            Matcher item = Pattern.compile("\"([^\"]*)\"").matcher(m.group(1));
            while (item.find()) result.add(item.group(1));
        }
        return result;
    }
}
