package io.jnbd.server.backend;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;

/** What the completing thread of an async backend holds back, and when and where it goes. */
class CompletionsTest {

    @Test
    void outsideTogetherNothingIsHeld() {
        List<List<String>> sent = new ArrayList<>();
        Consumer<List<String>> sink = sent::add;
        assertThat(Completions.hold(sink, "a")).isFalse();
        assertThat(sent).isEmpty();
    }

    @Test
    void itemsMadeTogetherReachEachSinkOnceAtTheEndInOrder() {
        List<List<String>> first = new ArrayList<>();
        List<List<String>> second = new ArrayList<>();
        Consumer<List<String>> a = first::add;
        Consumer<List<String>> b = second::add;
        Completions.together(() -> {
            assertThat(Completions.hold(a, "1")).isTrue();
            assertThat(Completions.hold(b, "x")).isTrue();
            assertThat(Completions.hold(a, "2")).isTrue();
            assertThat(first).as("nothing leaves before the end").isEmpty();
        });
        assertThat(first).containsExactly(List.of("1", "2"));
        assertThat(second).containsExactly(List.of("x"));
        // The batch is over: the next item is not held.
        assertThat(Completions.hold(a, "3")).isFalse();
    }

    @Test
    void aNestedTogetherJoinsTheOuterOne() {
        List<List<String>> sent = new ArrayList<>();
        Consumer<List<String>> sink = sent::add;
        Completions.together(() -> {
            Completions.hold(sink, "outer");
            Completions.together(() -> Completions.hold(sink, "inner"));
            assertThat(sent).isEmpty();
        });
        assertThat(sent).containsExactly(List.of("outer", "inner"));
    }

    @Test
    void aFailingSinkDoesNotStrandTheOthers() {
        List<List<String>> sent = new ArrayList<>();
        Consumer<List<String>> broken = items -> { throw new IllegalStateException("broken"); };
        Consumer<List<String>> fine = sent::add;
        assertThatThrownBy(() -> Completions.together(() -> {
            Completions.hold(broken, "lost");
            Completions.hold(fine, "kept");
        })).isInstanceOf(IllegalStateException.class);
        assertThat(sent).containsExactly(List.of("kept"));
    }

    @Test
    void itemsHeldWhenTheCompletionsThrowStillLeave() {
        List<List<String>> sent = new ArrayList<>();
        Consumer<List<String>> sink = sent::add;
        assertThatThrownBy(() -> Completions.together(() -> {
            Completions.hold(sink, "made before the failure");
            throw new IllegalArgumentException("callback failed");
        })).isInstanceOf(IllegalArgumentException.class);
        assertThat(sent).containsExactly(List.of("made before the failure"));
    }
}
