package edge

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/edge/udp"
	"github.com/nodeportlocal/npl/lbmodel"
)

// udpLB is a Service's load balancer with UDP listeners on ports.
func udpLB(name, vip string, members []lbmodel.Member, ports ...int32) *lbmodel.LoadBalancer {
	out := &lbmodel.LoadBalancer{Name: name, Service: "ns/x", VIPs: []string{vip}}
	for _, p := range ports {
		out.Listeners = append(out.Listeners, lbmodel.Listener{Port: p, Protocol: lbmodel.UDP,
			Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.UDP, p), Members: members}})
	}
	return out
}

// fakeUDP is a table on knftables' fake, read back as listing says.
func fakeUDP(listing string) (*knftables.Fake, *udp.Table) {
	fake := knftables.NewFake(knftables.InetFamily, udp.TableName)
	t := udp.NewWith(fake, func(context.Context) ([]byte, error) { return []byte(listing), nil },
		func(context.Context, udp.Key, netip.AddrPort) error { return nil })
	t.VerifyEvery = 1 << 62
	return fake, t
}

func TestConflicts_udpOnlyWithUDPAndOnlyWhenServed(t *testing.T) {
	desired := map[lbKey]*lbmodel.LoadBalancer{{"c1", "c1--ns-dns"}: udpLB("c1--ns-dns", "198.18.200.1", nil, 53)}
	_, table := fakeUDP("")
	on := &Edge{cfg: Config{UDP: table}, desired: desired}
	off := &Edge{desired: desired}
	if err := on.checkConflicts("c2", lb("c2--ns-web", "198.18.200.1", 53), nil); err != nil {
		t.Errorf("TCP/53 beside UDP/53: %v", err)
	}
	if err := on.checkConflicts("c2", udpLB("c2--ns-dns", "198.18.200.1", nil, 53), nil); !errors.Is(err, ErrConflict) {
		t.Errorf("UDP/53 of another load balancer on a VIP that serves UDP/53: %v; want ErrConflict", err)
	}
	if err := off.checkConflicts("c2", udpLB("c2--ns-dns", "198.18.200.1", nil, 53), nil); err != nil {
		t.Errorf("UDP/53 twice on an edge that serves no UDP (neither is served): %v", err)
	}
	if on.udpMode() != UDPNFTables || off.udpMode() != UDPOff {
		t.Errorf("udp modes %q and %q", on.udpMode(), off.udpMode())
	}
}

func TestCheckUDP_refusesAMemberOfTheOtherFamily(t *testing.T) {
	err := checkUDP(udpLB("c1--ns-dns", "198.18.200.1", []lbmodel.Member{{IP: "fd00::1", Port: 61000, Enabled: true}}, 53))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not of the VIP's IP family") {
		t.Fatalf("error %v; want ErrInvalid naming the family", err)
	}
}

func TestConvergeUDP_writesTheDesiredListenersUnlessTheChangeWasRefused(t *testing.T) {
	fake, table := fakeUDP("")
	members := []lbmodel.Member{{IP: "198.18.0.10", Port: 61001, Enabled: true}}
	e := &Edge{cfg: Config{UDP: table}, desired: map[lbKey]*lbmodel.LoadBalancer{
		{"c1", "c1--ns-dns"}: udpLB("c1--ns-dns", "198.18.200.1", members, 53),
	}}
	var changed bool
	err := ErrRejected
	e.convergeUDP(context.Background(), &changed, &err)
	if changed || strings.Contains(fake.Dump(), "198.18.0.10") {
		t.Fatalf("a refused change wrote the table:\n%s", fake.Dump())
	}
	err = nil
	e.convergeUDP(context.Background(), &changed, &err)
	if err != nil || !changed || !strings.Contains(fake.Dump(), "198.18.200.1 . 53 : goto u4-c612c801-53") {
		t.Fatalf("changed %v, %v; table:\n%s", changed, err, fake.Dump())
	}
}

// listing is nft -j list table inet npl-edge of one listener,
// 198.18.200.1:5353, members .10 (weight 3, taking flows) and .11 (weight
// 1, draining), as nft 1.0.6 prints it.
const listing = `{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
{"table": {"family": "inet", "name": "npl-edge", "handle": 1}},
{"map": {"family": "inet", "name": "udp4", "table": "npl-edge", "type": ["ipv4_addr", "inet_service"], "handle": 1, "map": "verdict",
  "elem": [[{"concat": ["198.18.200.1", 5353]}, {"goto": {"target": "u4-c612c801-5353"}}]]}},
{"map": {"family": "inet", "name": "udp6", "table": "npl-edge", "type": ["ipv6_addr", "inet_service"], "handle": 2, "map": "verdict"}},
{"map": {"family": "inet", "name": "m-u4-c612c801-5353", "table": "npl-edge", "type": ["ipv4_addr", "inet_service"], "handle": 5, "map": "mark",
  "elem": [[{"concat": ["198.18.0.10", 61001]}, 3], [{"concat": ["198.18.0.11", 61001]}, 1]]}},
{"map": {"family": "inet", "name": "s-u4-c612c801-5353", "table": "npl-edge", "type": "integer", "handle": 6, "map": "ipv4_addr . inet_service",
  "elem": [[0, {"concat": ["198.18.0.10", 61001]}]]}},
{"chain": {"family": "inet", "table": "npl-edge", "name": "prerouting", "handle": 2, "type": "nat", "hook": "prerouting", "prio": -101, "policy": "accept"}},
{"chain": {"family": "inet", "table": "npl-edge", "name": "u4-c612c801-5353", "handle": 4}},
{"rule": {"family": "inet", "table": "npl-edge", "chain": "prerouting", "handle": 7, "comment": "udp listeners ipv4", "expr": []}},
{"rule": {"family": "inet", "table": "npl-edge", "chain": "u4-c612c801-5353", "handle": 9, "comment": "mark for masquerade", "expr": []}},
{"rule": {"family": "inet", "table": "npl-edge", "chain": "u4-c612c801-5353", "handle": 10, "comment": "slots 1", "expr": []}}]}`

// TestUnserved_udpOnIPv6WithoutIPv6Forwarding: where the host does not
// forward IPv6, the UDP listeners on IPv6 VIPs are left out of the table
// and said unserved with the reason; those on IPv4 VIPs, and TCP on IPv6,
// are served.
func TestUnserved_udpOnIPv6WithoutIPv6Forwarding(t *testing.T) {
	fake, table := fakeUDP("")
	forwarding := errors.New("net.ipv6.conf.all.forwarding is 0")
	table.ForwardsIPv6 = func() error { return forwarding }
	v4 := []lbmodel.Member{{IP: "198.18.0.10", Port: 61001, Enabled: true}}
	v6 := []lbmodel.Member{{IP: "fd00:198:18::10", Port: 61001, Enabled: true}}
	e := &Edge{cfg: Config{UDP: table}, desired: map[lbKey]*lbmodel.LoadBalancer{
		{"c1", "c1--ns-dns"}:  udpLB("c1--ns-dns", "198.18.200.1", v4, 53),
		{"c1", "c1--ns-dns6"}: udpLB("c1--ns-dns6", "fd00:198:200::1", v6, 53),
	}}
	v4VIP, v6VIP := netip.MustParseAddr("198.18.200.1"), netip.MustParseAddr("fd00:198:200::1")
	if why := e.unserved(lbmodel.UDP, v6VIP); why != forwarding.Error() {
		t.Errorf("UDP on an IPv6 VIP: unserved %q, want %q", why, forwarding)
	}
	if why := e.unserved(lbmodel.UDP, v4VIP) + e.unserved(lbmodel.TCP, v6VIP); why != "" {
		t.Errorf("UDP on an IPv4 VIP and TCP on an IPv6 one: unserved %q, want both served", why)
	}
	var changed bool
	var err error
	e.convergeUDP(context.Background(), &changed, &err)
	if err != nil || !strings.Contains(fake.Dump(), "198.18.200.1 . 53") || strings.Contains(fake.Dump(), "fd00:198:200::1") {
		t.Fatalf("%v; the table serves the IPv6 VIP, or not the IPv4 one:\n%s", err, fake.Dump())
	}
	// Forwarding turned on: the next sync serves it.
	forwarding = nil
	e.convergeUDP(context.Background(), &changed, &err)
	if err != nil || !strings.Contains(fake.Dump(), "fd00:198:200::1 . 53") {
		t.Fatalf("%v; the IPv6 VIP is not served once the host forwards IPv6:\n%s", err, fake.Dump())
	}
	if why := (&Edge{}).unserved(lbmodel.UDP, v4VIP); why != api.ReasonNoUDP {
		t.Errorf("an edge without UDP: unserved %q, want %q", why, api.ReasonNoUDP)
	}
}

func TestListUDP_aGatewaysUDPListenerAsTheTableServesIt(t *testing.T) {
	_, table := fakeUDP(listing)
	name := lbmodel.GatewayLoadBalancerName("c1", "ns", "gw")
	pool := lbmodel.PoolName(name, lbmodel.UDP, 5353)
	gw := &lbmodel.LoadBalancer{Name: name, Gateway: "ns/gw", Kind: lbmodel.L7, VIPs: []string{"198.18.200.1"},
		HTTP:      &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}},
		Listeners: []lbmodel.Listener{{Port: 5353, Protocol: lbmodel.UDP, Pool: lbmodel.Pool{Name: pool}}}}
	other := udpLB("c1--ns-dns", "198.18.200.2", nil, 53) // not in the table: left out
	e := &Edge{cfg: Config{UDP: table}, desired: map[lbKey]*lbmodel.LoadBalancer{{"c1", name}: gw, {"c1", other.Name}: other}}
	lbs := map[string]*lbmodel.LoadBalancer{}
	if err := e.listUDP(context.Background(), "c1", lbs); err != nil {
		t.Fatal(err)
	}
	want := map[string]*lbmodel.LoadBalancer{name: {Name: name, Gateway: "ns/gw", Kind: lbmodel.L7, VIPs: []string{"198.18.200.1"},
		HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}},
		Listeners: []lbmodel.Listener{{Port: 5353, Protocol: lbmodel.UDP, Pool: lbmodel.Pool{Name: pool, Members: []lbmodel.Member{
			{IP: "198.18.0.10", Port: 61001, Enabled: true, Weight: 3},
			{IP: "198.18.0.11", Port: 61001, Enabled: false},
		}}}}}}
	if diff := cmp.Diff(want, lbs); diff != "" {
		t.Fatalf("listed (-want +got):\n%s", diff)
	}
	none := map[string]*lbmodel.LoadBalancer{}
	if err := e.listUDP(context.Background(), "c2", none); err != nil || len(none) != 0 {
		t.Fatalf("another cluster: %v, %v; want nothing", none, err)
	}
}
