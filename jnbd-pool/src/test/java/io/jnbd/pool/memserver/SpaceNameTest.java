package io.jnbd.pool.memserver;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

/** A space has one name: the form SpaceName writes, and nothing else. */
class SpaceNameTest {
    @Test
    void theNameRoundTrips() {
        SpaceName s = new SpaceName(7, 0, 0x1234abcdL);
        assertThat(s.exportName()).isEqualTo("pool/7/0/000000001234abcd");
        assertThat(SpaceName.parse(s.exportName())).isEqualTo(s);
        assertThat(SpaceName.parse("pool/65535/65535/ffffffffffffffff")).isEqualTo(new SpaceName(65535, 65535, -1));
        SpaceName later = s.withSession(12);
        assertThat(later.exportName()).isEqualTo("pool/7/0/000000001234abcd/12");
        assertThat(SpaceName.parse(later.exportName())).isEqualTo(later);
        assertThat(later.space()).as("a session is a connection's, the space is the same").isEqualTo(s.space());
    }

    @ParameterizedTest
    @ValueSource(strings = {"pool/+7/0/0000000000000001", "pool/7/+0/0000000000000001", "pool/07/0/0000000000000001",
        "pool/7/00/0000000000000001", "pool/\u0667/0/0000000000000001", "pool/7/\u0660/0000000000000001",
        "pool/7/0/000000000000000A", "pool/7/0/+000000000000001", "pool/0/0/0000000000000001", "pool/65536/0/0000000000000001",
        "pool/7/65536/0000000000000001", "pool/7/0/00000000000000001", "pool/7/0", "pool/7/0/0000000000000001/", " pool/7/0/0000000000000001",
        "POOL/7/0/0000000000000001", "status", "",
        "pool/7/0/0000000000000001/0", "pool/7/0/0000000000000001/01", "pool/7/0/0000000000000001/+1",
        "pool/7/0/0000000000000001/2147483648", "pool/7/0/0000000000000001/1/"})
    void anythingElseIsNoSpace(String name) {
        assertThat(SpaceName.parse(name)).isNull();
    }
}
