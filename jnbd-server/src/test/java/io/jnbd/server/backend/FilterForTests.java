package io.jnbd.server.backend;

/** Passes every call to the backend it wraps; tests override the calls they want to change. */
public class FilterForTests extends FilterBackend {

    public FilterForTests(Backend inner) {
        super(inner);
    }

    @Override public String describe() { return "test filter over " + inner.describe(); }
}
