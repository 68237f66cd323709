package avi

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/providertest"
)

// uuids returns the uuid of every object of the simulator whose name
// starts with prefix, keyed "type/name".
func (f *fixture) uuids(prefix string) map[string]string {
	out := map[string]string{}
	for _, typ := range []string{"vsvip", "virtualservice", "l4policyset", "httppolicyset", "pool", "poolgroup", "sslkeyandcertificate"} {
		for _, o := range f.sim.Objects("admin", typ) {
			if name, _ := o["name"].(string); strings.HasPrefix(name, prefix) {
				out[typ+"/"+name], _ = o["uuid"].(string)
			}
		}
	}
	return out
}

// The Services team-a/x and team/a-x had one load balancer up to 0.x,
// c1--team-a-x. After the upgrade the other Service gets objects and a VIP
// of its own, and the owner's Ensure renames its objects in place: the
// same uuids, the same VIP, nothing left under the old name.
func TestProvider_takesTheOldNameOverInPlaceForItsOwnerOnly(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	owner := &lbmodel.LoadBalancer{Name: lbmodel.LoadBalancerName(cluster, "team-a", "x"), Service: "team-a/x"}
	owner.Listeners = []lbmodel.Listener{listener(owner.Name, lbmodel.TCP, 80, member("198.18.0.11", 61000)),
		listener(owner.Name, lbmodel.UDP, 53, member("198.18.0.11", 61001))}
	old := providertest.AsLegacy(cluster, owner)
	if old.Name != "c1--team-a-x" {
		t.Fatalf("old name %s", old.Name)
	}
	oldVIP := f.ensure(old).VIPs
	before := f.uuids(old.Name)

	impostor := &lbmodel.LoadBalancer{Name: lbmodel.LoadBalancerName(cluster, "team", "a-x"), Service: "team/a-x"}
	impostor.Listeners = []lbmodel.Listener{listener(impostor.Name, lbmodel.TCP, 80, member("198.18.0.12", 61000))}
	if vips := f.ensure(impostor).VIPs; slices.Equal(vips, oldVIP) {
		t.Fatalf("team/a-x got team-a/x's VIP %v", vips)
	}
	if got := f.uuids(old.Name); !cmp.Equal(before, got) {
		t.Fatalf("team/a-x's Ensure changed team-a/x's objects (-before +after):\n%s", cmp.Diff(before, got))
	}

	if vips := f.ensure(owner).VIPs; !slices.Equal(vips, oldVIP) {
		t.Errorf("team-a/x's VIP %v, want its old %v", vips, oldVIP)
	}
	after := f.uuids(owner.Name)
	want := map[string]string{}
	for k, uuid := range before {
		typ, name, _ := strings.Cut(k, "/")
		want[typ+"/"+owner.Name+strings.TrimPrefix(name, old.Name)] = uuid
	}
	if diff := cmp.Diff(want, after); diff != "" {
		t.Errorf("objects renamed in place (-old uuids under the new names +got):\n%s", diff)
	}
	if left := f.uuids(old.Name + "-"); len(left) > 0 || slices.Contains(f.names("virtualservice"), old.Name) {
		t.Errorf("left under the old name: %v", left)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(owner, oldVIP...), withVIPs(impostor, f.ensure(impostor).VIPs...)}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	f.sim.ResetCounters()
	f.ensure(owner)
	if w := f.sim.Writes(); w != 0 {
		t.Errorf("Ensure after the takeover wrote %d times, want 0", w)
	}
}

// An Ingress's L7 load balancer under its old name keeps its VsVip (VIP),
// virtual service and policy set, renamed in place; its old pools and
// certificates are replaced by the new names' and deleted.
func TestProvider_takesAnL7LoadBalancerOverFromItsOldName(t *testing.T) {
	for _, lb := range []*lbmodel.LoadBalancer{ingressLB(tlsCert(t, "shop-tls", "shop.example.com")),
		gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com"))} {
		t.Run(lb.Name, func(t *testing.T) { takesAnL7LoadBalancerOver(t, lb) })
	}
}

func takesAnL7LoadBalancerOver(t *testing.T, lb *lbmodel.LoadBalancer) {
	f := newFixture(t, fixtureOptions{})
	old := providertest.AsLegacy(cluster, lb)
	oldVIP := f.ensure(old).VIPs
	before := f.uuids(old.Name)
	if vips := f.ensure(lb).VIPs; !slices.Equal(vips, oldVIP) {
		t.Errorf("VIP %v, want the old %v", vips, oldVIP)
	}
	after := f.uuids(lb.Name)
	for _, typ := range []string{"vsvip", "virtualservice", "httppolicyset"} {
		if got, want := after[typ+"/"+lb.Name], before[typ+"/"+old.Name]; got == "" || got != want {
			t.Errorf("%s: uuid %q under the new name, want the old %q", typ, got, want)
		}
	}
	var left []string
	for k := range f.uuids("c1--") {
		if strings.Contains(k, "/"+old.Name) {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		t.Errorf("left under the old name: %v", left)
	}
	if lb.Gateway == "" {
		if diff := cmp.Diff([]lbmodel.LoadBalancer{listedL7(lb, oldVIP...)}, f.list()); diff != "" {
			t.Errorf("List (-want +got):\n%s", diff)
		}
	}
	if lbs := f.list(); len(lbs) != 1 || lbs[0].Name != lb.Name {
		t.Errorf("List has %d load balancers, want %s alone", len(lbs), lb.Name)
	}
}
