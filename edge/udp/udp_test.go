package udp_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/nodeportlocal/npl/edge/udp"
	"github.com/nodeportlocal/npl/lbmodel"
)

func fakeTable(t *testing.T) (*knftables.Fake, *udp.Table, *[]string) {
	fake := knftables.NewFake(knftables.InetFamily, udp.TableName)
	var flushed []string
	tab := udp.NewWith(fake, func(context.Context) ([]byte, error) { return nil, errors.New("not read in this test") },
		func(_ context.Context, k udp.Key, m netip.AddrPort) error {
			flushed = append(flushed, k.String()+">"+m.String())
			return nil
		})
	tab.VerifyEvery = time.Hour
	return fake, tab, &flushed
}

func TestSync_slotsFollowWeightsAndDrainingMembersHaveNone(t *testing.T) {
	fake, tab, flushed := fakeTable(t)
	ctx := context.Background()
	ls := []udp.Listener{{VIP: netip.MustParseAddr("198.18.200.1"), Port: 53, Members: []lbmodel.Member{
		{IP: "198.18.0.10", Port: 61001, Enabled: true, Weight: 70},
		{IP: "198.18.0.11", Port: 61001, Enabled: true, Weight: 30},
		{IP: "198.18.0.12", Port: 61001, Enabled: false, Weight: 50},
	}}}
	if _, err := tab.Sync(ctx, ls); err != nil {
		t.Fatal(err)
	}
	dump := fake.Dump()
	for _, want := range []string{
		"add element inet npl-edge udp4 { 198.18.200.1 . 53 : goto u4-c612c801-53 }",
		"add element inet npl-edge m-u4-c612c801-53 { 198.18.0.12 . 61001 : 50 }",
		"add element inet npl-edge s-u4-c612c801-53 { 6 : 198.18.0.10 . 61001 }",
		"add element inet npl-edge s-u4-c612c801-53 { 9 : 198.18.0.11 . 61001 }",
		"dnat ip to numgen random mod 10 map @s-u4-c612c801-53",
		"meta mark & 0x00200000 == 0x00200000 masquerade",
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("the table lacks %q:\n%s", want, dump)
		}
	}
	if strings.Contains(dump, "s-u4-c612c801-53 { 10 :") || strings.Contains(dump, ": 198.18.0.12 . 61001 }") {
		t.Errorf("more than 10 slots, or a slot for the draining member:\n%s", dump)
	}

	// A member removed: only its listener is written again, and its flows go.
	ls[0].Members = ls[0].Members[:2]
	ls = append(ls, udp.Listener{VIP: netip.MustParseAddr("fd00:198:200::1"), Port: 53, Members: []lbmodel.Member{{IP: "fd00:198:18::10", Port: 61001, Enabled: true}}})
	if _, err := tab.Sync(ctx, ls); err != nil {
		t.Fatal(err)
	}
	dump = fake.Dump()
	if strings.Contains(dump, "198.18.0.12") || !strings.Contains(dump, "add element inet npl-edge udp6 { fd00:198:200::1 . 53 : goto u6-fd000198020000000000000000000001-53 }") ||
		!strings.Contains(dump, "dnat ip6 to numgen random mod 1 map @s-u6-fd000198020000000000000000000001-53") {
		t.Errorf("after removing a member and adding an IPv6 listener:\n%s", dump)
	}
	if strings.Join(*flushed, ",") != "198.18.200.1:53>198.18.0.12:61001" {
		t.Errorf("flows deleted %q; want those of the removed member only", *flushed)
	}

	// The same again writes nothing.
	if changed, err := tab.Sync(ctx, ls); err != nil || changed {
		t.Errorf("Sync of the same listeners: changed %v, %v", changed, err)
	}

	// Every listener removed: no chain or map of one is left, their flows go.
	*flushed = nil
	if _, err := tab.Sync(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if dump := fake.Dump(); strings.Contains(dump, "u4-") || strings.Contains(dump, "u6-") {
		t.Errorf("removed listeners are left:\n%s", dump)
	}
	if len(*flushed) != 3 {
		t.Errorf("flows deleted %q; want those of the 3 members", *flushed)
	}
}

func TestValidate_refusesMixedFamiliesAndDuplicates(t *testing.T) {
	v4 := netip.MustParseAddr("198.18.200.1")
	for name, ls := range map[string][]udp.Listener{
		"member of the other family": {{VIP: v4, Port: 53, Members: []lbmodel.Member{{IP: "fd00::1", Port: 1, Enabled: true}}}},
		"listed twice":               {{VIP: v4, Port: 53}, {VIP: v4, Port: 53}},
		"port 0":                     {{VIP: v4, Port: 0}},
		"member without address":     {{VIP: v4, Port: 53, Members: []lbmodel.Member{{IP: "x", Port: 1}}}},
	} {
		if err := udp.Validate(ls); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The flows of a removed member whose conntrack entries could not be
// deleted are deleted at a later Sync, unless the member is back.
func TestSync_triesAgainTheFlowsItCouldNotDelete(t *testing.T) {
	ctx := context.Background()
	fake := knftables.NewFake(knftables.InetFamily, udp.TableName)
	failing, flushed := true, []string{}
	tab := udp.NewWith(fake, func(context.Context) ([]byte, error) { return nil, errors.New("not read in this test") },
		func(_ context.Context, k udp.Key, m netip.AddrPort) error {
			if failing {
				return errors.New("conntrack: busy")
			}
			flushed = append(flushed, k.String()+">"+m.String())
			return nil
		})
	tab.VerifyEvery = time.Hour
	vip := netip.MustParseAddr("198.18.200.1")
	a := lbmodel.Member{IP: "198.18.0.10", Port: 61001, Enabled: true}
	b := lbmodel.Member{IP: "198.18.0.11", Port: 61001, Enabled: true}
	sync := func(ms ...lbmodel.Member) {
		t.Helper()
		if _, err := tab.Sync(ctx, []udp.Listener{{VIP: vip, Port: 53, Members: ms}}); err != nil {
			t.Fatal(err)
		}
	}
	sync(a, b)
	sync(a) // b removed: its flows cannot be deleted now
	if len(flushed) != 0 {
		t.Fatalf("flushed %v while conntrack fails", flushed)
	}
	failing = false
	sync(a) // nothing changed in the table: b's flows are deleted now
	if strings.Join(flushed, ",") != "198.18.200.1:53>198.18.0.11:61001" {
		t.Errorf("flows deleted at the next Sync %q; want b's", flushed)
	}
	flushed = nil
	sync(a)
	if len(flushed) != 0 {
		t.Errorf("flows deleted again %q; want none", flushed)
	}

	// A member back on its listener keeps its flows.
	failing = true
	sync(a, b)
	sync(a)
	failing = false
	sync(a, b)
	if len(flushed) != 0 {
		t.Errorf("flows of a member that is back deleted: %q", flushed)
	}
}
