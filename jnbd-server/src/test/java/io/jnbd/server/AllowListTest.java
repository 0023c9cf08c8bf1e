package io.jnbd.server;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.net.InetAddress;
import java.util.List;
import org.junit.jupiter.api.Test;

/** allow=: address ranges of both families, single addresses, identities, and the mistakes it refuses. */
class AllowListTest {

    private static Client at(String address, String... identities) {
        return new Client(address == null ? null : InetAddress.ofLiteral(address), List.of(identities));
    }

    private static AllowList allow(String... values) {
        return AllowList.parse(List.of(values));
    }

    @Test
    void ipv4RangesAndAddresses() {
        AllowList a = allow("10.0.0.0/8;192.0.2.7;172.16.0.0/12");
        assertThat(a.allows(at("10.200.3.4"))).isTrue();
        assertThat(a.allows(at("11.0.0.1"))).isFalse();
        assertThat(a.allows(at("192.0.2.7"))).isTrue();
        assertThat(a.allows(at("192.0.2.8"))).isFalse();
        assertThat(a.allows(at("172.31.255.255"))).isTrue();
        assertThat(a.allows(at("172.32.0.0"))).isFalse();
        assertThat(a.allows(at("::1"))).as("another family never matches").isFalse();
    }

    @Test
    void prefixesThatDoNotEndOnAByte() {
        AllowList a = allow("192.168.4.0/22");
        assertThat(a.allows(at("192.168.7.255"))).isTrue();
        assertThat(a.allows(at("192.168.8.0"))).isFalse();
        assertThat(a.allows(at("192.168.3.255"))).isFalse();
        assertThat(allow("0.0.0.0/0").allows(at("203.0.113.9"))).isTrue();
    }

    @Test
    void ipv6RangesAndIpv4MappedClients() {
        AllowList a = allow("fd00::/8;2001:db8::1");
        assertThat(a.allows(at("fd12:3456::9"))).isTrue();
        assertThat(a.allows(at("fe80::1"))).isFalse();
        assertThat(a.allows(at("2001:db8::1"))).isTrue();
        assertThat(a.allows(at("2001:db8::2"))).isFalse();
        // An IPv4 client of a dual-stack listener shows as ::ffff:a.b.c.d.
        assertThat(allow("10.0.0.0/8").allows(new Client(InetAddress.ofLiteral("::ffff:10.0.0.5"), List.of()))).isTrue();
    }

    @Test
    void identitiesMatchExactlyAndUnixClientsHaveNoAddress() {
        AllowList a = allow("alice;10.0.0.0/8", "bob.example.com");
        assertThat(a.allows(at("127.0.0.1", "alice"))).isTrue();
        assertThat(a.allows(at("127.0.0.1", "server", "bob.example.com"))).as("any of its names").isTrue();
        assertThat(a.allows(at("127.0.0.1", "Alice"))).isFalse();
        assertThat(a.allows(at("127.0.0.1"))).isFalse();
        assertThat(a.allows(at(null, "alice"))).as("a Unix socket client with TLS").isTrue();
        assertThat(a.allows(at(null))).as("a Unix socket client without").isFalse();
        assertThat(allow("42").allows(at("0.0.0.42"))).as("a number is an identity, not an address").isFalse();
        assertThat(allow("42").allows(at("127.0.0.1", "42"))).isTrue();
    }

    @Test
    void noAllowMeansAnyone() {
        assertThat(AllowList.parse(List.of())).isSameAs(AllowList.ANYONE);
        assertThat(AllowList.ANYONE.allows(at(null))).isTrue();
    }

    @Test
    void mistakesAreRefusedWithTheEntryNamed() {
        assertThatThrownBy(() -> allow("10.0.0.0/33")).hasMessageContaining("10.0.0.0/33").hasMessageContaining("0 to 32");
        assertThatThrownBy(() -> allow("10.0.0/8")).hasMessageContaining("'10.0.0/8' is not an address");
        assertThatThrownBy(() -> allow("fd00::/x")).hasMessageContaining("fd00::/x");
        assertThatThrownBy(() -> allow("alice;;bob")).hasMessageContaining("empty entry");
        assertThatThrownBy(() -> AllowList.parse(java.util.Collections.singletonList(null))).hasMessageContaining("at least one");
        assertThatThrownBy(() -> allow("CN=bob")).hasMessageContaining("alone (bob)");
    }

    @Test
    void readonlyForLimitsWhomItMatchesAndAdmitsEveryoneWithoutAllow() {
        AllowList a = AllowList.parse(List.of(), List.of("bob;10.0.0.0/8"));
        assertThat(a.allows(at("192.0.2.1"))).as("no allow=: everyone may open it").isTrue();
        assertThat(a.readOnlyFor(at("10.1.2.3"))).isTrue();
        assertThat(a.readOnlyFor(at(null, "bob"))).isTrue();
        assertThat(a.readOnlyFor(at("192.0.2.1", "alice"))).isFalse();
        assertThat(a.admitsIdentities()).as("bob is limited, not admitted: a refused client gains nothing by TLS").isFalse();
        assertThat(a).hasToString("anyone (read-only for bob;10.0.0.0/8)");

        AllowList both = AllowList.parse(List.of("alice;bob"), List.of("bob"));
        assertThat(both.allows(at(null, "carol"))).isFalse();
        assertThat(both.readOnlyFor(at(null, "alice"))).isFalse();
        assertThat(both.readOnlyFor(at(null, "bob"))).isTrue();
        assertThat(AllowList.ANYONE.readOnlyFor(at("127.0.0.1", "bob"))).isFalse();

        assertThatThrownBy(() -> AllowList.parse(List.of(), List.of("10.0.0/8"))).hasMessageContaining("readonly-for entry '10.0.0/8'");
        assertThatThrownBy(() -> AllowList.parse(List.of(), List.of(""))).hasMessageContaining("readonly-for= needs");
    }
}
