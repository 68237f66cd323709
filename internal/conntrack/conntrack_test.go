package conntrack

import (
	"net/netip"
	"slices"
	"testing"
)

func TestUDPFlows_args(t *testing.T) {
	for _, tc := range []struct {
		f    UDPFlows
		want []string
	}{
		{UDPFlows{DstPort: 61000}, []string{"-f", "ipv4", "-p", "udp", "--orig-port-dst", "61000"}},
		{UDPFlows{IPv6: true, DstPort: 61000}, []string{"-f", "ipv6", "-p", "udp", "--orig-port-dst", "61000"}},
		{UDPFlows{Dst: netip.MustParseAddr("198.18.200.1"), DstPort: 53, ReplySrc: netip.MustParseAddrPort("198.18.0.2:61001")},
			[]string{"-f", "ipv4", "-p", "udp", "--orig-dst", "198.18.200.1", "--orig-port-dst", "53", "--reply-src", "198.18.0.2", "--reply-port-src", "61001"}},
	} {
		if got := tc.f.args(); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: args %q, want %q", tc.f, got, tc.want)
		}
	}
}
