package bigip

import (
	"net/netip"
	"testing"
)

func TestInventory_chooseVIP(t *testing.T) {
	r := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, p := range s {
			out = append(out, netip.MustParsePrefix(p))
		}
		return out
	}
	a := netip.MustParseAddr
	tests := []struct {
		name      string
		virtuals  map[string]string // virtual name -> VIP in use
		reserved  map[string]string // load balancer -> VIP chosen earlier
		lb        string
		requested string
		current   string
		ranges    []netip.Prefix
		want      string
		wantErr   bool
	}{
		{name: "first host address of a subnet", lb: "x", ranges: r("198.18.100.0/30"), want: "198.18.100.1"},
		{name: "a /32 is its own address", lb: "x", ranges: r("198.18.100.9/32"), want: "198.18.100.9"},
		{name: "a /31 has no broadcast", lb: "x", ranges: r("198.18.100.8/31"), want: "198.18.100.8"},
		{name: "skips addresses virtuals use", virtuals: map[string]string{"v": "198.18.100.1"}, lb: "x", ranges: r("198.18.100.0/29"), want: "198.18.100.2"},
		{name: "skips other reservations", reserved: map[string]string{"y": "198.18.100.1"}, lb: "x", ranges: r("198.18.100.0/29"), want: "198.18.100.2"},
		{name: "keeps its own reservation", reserved: map[string]string{"x": "198.18.100.3"}, lb: "x", ranges: r("198.18.100.0/29"), want: "198.18.100.3"},
		{name: "current beats a reservation", reserved: map[string]string{"x": "198.18.100.3"}, lb: "x", current: "198.18.100.5", ranges: r("198.18.100.0/29"), want: "198.18.100.5"},
		{name: "requested beats current", lb: "x", requested: "203.0.113.9", current: "198.18.100.5", want: "203.0.113.9"},
		{name: "a requested address may be shared", virtuals: map[string]string{"v": "198.18.100.1"}, lb: "x", requested: "198.18.100.1", want: "198.18.100.1"},
		{name: "next range when one is full", virtuals: map[string]string{"v": "198.18.100.1", "w": "198.18.100.2"}, lb: "x", ranges: r("198.18.100.0/30", "198.19.0.0/24"), want: "198.19.0.1"},
		{name: "IPv6 skips the subnet-router anycast address", lb: "x", ranges: r("2001:db8::/126"), want: "2001:db8::1"},
		{name: "full", virtuals: map[string]string{"v": "198.18.100.1", "w": "198.18.100.2"}, lb: "x", ranges: r("198.18.100.0/30"), wantErr: true},
		{name: "no ranges", lb: "x", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv := newInventory()
			for name, vip := range tc.virtuals {
				inv.setVirtual(name, "", a(vip))
			}
			for lb, vip := range tc.reserved {
				_, _ = inv.chooseVIP(lb, a(vip), netip.Addr{}, nil)
			}
			var requested, current netip.Addr
			if tc.requested != "" {
				requested = a(tc.requested)
			}
			if tc.current != "" {
				current = a(tc.current)
			}
			got, err := inv.chooseVIP(tc.lb, requested, current, tc.ranges)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("chooseVIP = %v, want an error", got)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Errorf("chooseVIP = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestInventory_freesAddressesOfDeletedLoadBalancers(t *testing.T) {
	inv := newInventory()
	ranges := []netip.Prefix{netip.MustParsePrefix("198.18.100.0/30")}
	first, err := inv.chooseVIP("a", netip.Addr{}, netip.Addr{}, ranges)
	if err != nil {
		t.Fatal(err)
	}
	inv.setVirtual("a-TCP-80", "a", first)
	if _, err := inv.chooseVIP("b", netip.Addr{}, netip.Addr{}, ranges); err != nil {
		t.Fatal(err)
	}
	if _, err := inv.chooseVIP("c", netip.Addr{}, netip.Addr{}, ranges); err == nil {
		t.Fatal("a third VIP from a /30, want an error")
	}
	inv.removeVirtual("a-TCP-80")
	inv.forget("a")
	got, err := inv.chooseVIP("c", netip.Addr{}, netip.Addr{}, ranges)
	if err != nil || got != first {
		t.Errorf("chooseVIP after a was deleted = %v, %v; want %v", got, err, first)
	}
	if v, p := inv.objectsOf("a"); len(v)+len(p) != 0 {
		t.Errorf("objects of a deleted load balancer: %v %v", v, p)
	}
}
