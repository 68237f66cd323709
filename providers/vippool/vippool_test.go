package vippool

import (
	"errors"
	"net/netip"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func used(addrs ...string) func(netip.Addr) bool {
	set := map[netip.Addr]bool{}
	for _, a := range addrs {
		set[netip.MustParseAddr(a)] = true
	}
	return func(a netip.Addr) bool { return set[a] }
}

func TestFirst(t *testing.T) {
	tests := []struct {
		name   string
		ranges []netip.Prefix
		inUse  func(netip.Addr) bool
		want   string
	}{
		{"skips the network address", prefixes("203.0.113.0/29"), used(), "203.0.113.1"},
		{"skips used addresses", prefixes("203.0.113.0/29"), used("203.0.113.1", "203.0.113.2"), "203.0.113.3"},
		{"a range given unmasked starts at its network", prefixes("203.0.113.5/29"), used(), "203.0.113.1"},
		{"a /32 is usable", prefixes("198.51.100.7/32"), used(), "198.51.100.7"},
		{"a /31 has no network or broadcast address", prefixes("198.51.100.6/31"), used(), "198.51.100.6"},
		{"the next range once one is full", prefixes("203.0.113.0/30", "198.51.100.0/29"), used("203.0.113.1", "203.0.113.2"), "198.51.100.1"},
		{"IPv6 skips the subnet-router anycast address", prefixes("2001:db8::/126"), used(), "2001:db8::1"},
		{"IPv6 takes the last address (no broadcast)", prefixes("2001:db8::/126"), used("2001:db8::1", "2001:db8::2"), "2001:db8::3"},
		{"an IPv6 /127 has no anycast address", prefixes("2001:db8::/127"), used(), "2001:db8::"},
		{"an IPv6 /128 is usable", prefixes("2001:db8::7/128"), used(), "2001:db8::7"},
		{"an IPv6 range given unmasked starts after its anycast address", prefixes("fd00:198:200::9/120"), used(), "fd00:198:200::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := First(tt.ranges, tt.inUse)
			if err != nil || got.String() != tt.want {
				t.Errorf("First = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestFirst_errors(t *testing.T) {
	if _, err := First(nil, used()); !errors.Is(err, ErrEmpty) {
		t.Errorf("First(no ranges) = %v, want ErrEmpty", err)
	}
	// A /30 has two usable addresses; the broadcast address is never taken.
	_, err := First(prefixes("203.0.113.0/30"), used("203.0.113.1", "203.0.113.2"))
	if !errors.Is(err, ErrExhausted) || err.Error() != "no free VIP left in the VIP pool [203.0.113.0/30]" {
		t.Errorf("First(full) = %v, want ErrExhausted naming the ranges", err)
	}
	// A /126 has three usable addresses; the anycast address is never taken.
	if a, err := First(prefixes("2001:db8::/126"), used("2001:db8::1", "2001:db8::2", "2001:db8::3")); !errors.Is(err, ErrExhausted) {
		t.Errorf("First(full IPv6 /126) = %v, %v; want ErrExhausted", a, err)
	}
}
