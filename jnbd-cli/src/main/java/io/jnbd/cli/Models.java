package io.jnbd.cli;

import java.util.function.Consumer;
import java.util.function.Supplier;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.IGetter;
import picocli.CommandLine.Model.ISetter;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine.Model.PositionalParamSpec;

/**
 * picocli command models written in code instead of read from annotations, for the commands whose start-up is part
 * of their speed ({@code jnbd} itself, {@code info}, {@code copy} and {@code cmp}). Reading annotations makes the JVM generate a proxy class
 * per annotation type the first time; for the root and copy that was 8 classes and 60-70 ms of a 0.45 s incremental
 * copy, where the model built here takes about 20.
 */
final class Models {

    private Models() {
    }

    /** A command named {@code name} run by {@code command}, with its usage text and the standard help options. */
    static CommandSpec command(Object command, String name, String[] description, String[] footer) {
        CommandSpec s = CommandSpec.wrapWithoutInspection(command).name(name);
        s.usageMessage().description(description).footer(footer);
        standardHelpOptions(s);
        return s;
    }

    /** {@code -h} and {@code -V} as picocli's {@code mixinStandardHelpOptions} adds them, in its words. */
    static void standardHelpOptions(CommandSpec spec) {
        spec.addOption(OptionSpec.builder("-h", "--help").usageHelp(true)
            .description("Show this help message and exit.").build());
        spec.addOption(OptionSpec.builder("-V", "--version").versionHelp(true)
            .description("Print version information and exit.").build());
    }

    /** An option of {@code type} whose value is read by {@code get} and stored by {@code set}. */
    static <V> OptionSpec.Builder option(String name, Class<V> type, Supplier<V> get, Consumer<V> set) {
        Binding<V> b = new Binding<>(get, set);
        // The initial value is what picocli puts back before each parse; annotations would have read it from the field.
        return OptionSpec.builder(name).type(type).getter(b).setter(b).initialValue(get.get());
    }

    /** A required positional parameter of type String at {@code index}, read by {@code get} and stored by {@code set}. */
    static PositionalParamSpec.Builder positional(String index, Supplier<String> get, Consumer<String> set) {
        Binding<String> b = new Binding<>(get, set);
        return PositionalParamSpec.builder().index(index).arity("1").required(true).type(String.class).getter(b).setter(b)
            .initialValue(get.get());
    }

    /** A field of a command as picocli sees it: what it holds now, and how a parsed value gets there. */
    static final class Binding<V> implements IGetter, ISetter {
        private final Supplier<V> get;
        private final Consumer<V> set;

        Binding(Supplier<V> get, Consumer<V> set) {
            this.get = get;
            this.set = set;
        }

        @Override
        @SuppressWarnings("unchecked")
        public <T> T get() {
            return (T) get.get();
        }

        @Override
        @SuppressWarnings("unchecked")
        public <T> T set(T value) {
            T old = get();
            set.accept((V) value);
            return old;
        }
    }
}
