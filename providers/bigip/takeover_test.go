package bigip

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/providertest"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

// virtualsOn returns the virtuals of the BIG-IP by destination, full path
// and pool.
func virtualsOn(sim *bigipsim.Server) map[string]string {
	out := map[string]string{}
	for _, v := range sim.Dump().Virtuals {
		out[v.Destination] = v.FullPath + " " + v.Pool
	}
	return out
}

// The Services team-a/x and team/a-x had one load balancer up to 0.x,
// c1--team-a-x. After the upgrade the other Service gets a VIP of its own
// and leaves the owner's objects alone; the owner's Ensure swaps each old
// virtual for the new one on the same destination in one transaction (a
// failed commit changes nothing), with new pools holding the members as
// they were (a draining one stays disabled), and deletes the old pools.
func TestProvider_takesTheOldNameOverInATransactionForItsOwnerOnly(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	owner := newLB("team-a/x", tcp(80, member("198.18.0.11", 61000), drained("198.18.0.12", 61000)), udp(53, member("198.18.0.11", 61001)))
	old := providertest.AsLegacy(testCluster, owner)
	if old.Name != "c1--team-a-x" {
		t.Fatalf("old name %s", old.Name)
	}
	oldVIP := e.ensure(t, old).VIPs
	oldVirtuals := virtualsOn(e.sim)

	impostor := newLB("team/a-x", tcp(80, member("198.18.0.13", 61000)))
	if vips := e.ensure(t, impostor).VIPs; slices.Equal(vips, oldVIP) {
		t.Fatalf("team/a-x got team-a/x's VIP %v", vips)
	}
	for dest, v := range oldVirtuals {
		if virtualsOn(e.sim)[dest] != v {
			t.Fatalf("team/a-x's Ensure changed team-a/x's virtual on %s", dest)
		}
	}

	// A commit that fails changes nothing: the old virtual still serves.
	id, err := e.sim.InjectFault(bigipsim.Fault{Method: "PATCH", Path: "transaction/", Status: 500, Message: "commit failed"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.prov.Ensure(ctx, owner); err == nil || !strings.Contains(err.Error(), "commit failed") {
		t.Fatalf("Ensure with the commit failing: %v", err)
	}
	e.sim.RemoveFault(id)
	for dest, v := range oldVirtuals {
		if virtualsOn(e.sim)[dest] != v {
			t.Fatalf("a failed commit changed the virtual on %s: %s, want %s", dest, virtualsOn(e.sim)[dest], v)
		}
	}

	e.sim.ResetCounters()
	if vips := e.ensure(t, owner).VIPs; !slices.Equal(vips, oldVIP) {
		t.Errorf("team-a/x's VIP %v, want its old %v", vips, oldVIP)
	}
	if n := e.sim.Count("PATCH", bigipsim.KindTransaction); n != len(oldVirtuals) {
		t.Errorf("%d transactions committed, want one per virtual (%d)", n, len(oldVirtuals))
	}
	after := virtualsOn(e.sim)
	for dest := range oldVirtuals {
		want := "/" + testPartition + "/" + owner.Name
		if v := after[dest]; !strings.HasPrefix(v, want+"-") {
			t.Errorf("the virtual on %s is %q, want %s's", dest, v, owner.Name)
		}
	}
	if got := poolOf(t, e.sim, lbmodel.PoolName(owner.Name, lbmodel.TCP, 80)).Members; len(got) != 2 || got[1].Session != "user-disabled" {
		t.Errorf("the new TCP pool's members %+v: want both, the draining one disabled", got)
	}
	for _, p := range e.sim.Dump().Pools {
		if strings.Contains(p.FullPath, old.Name+"-") {
			t.Errorf("pool %s of the old name is left", p.FullPath)
		}
	}
	lbs, err := e.prov.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, lb := range lbs {
		names = append(names, lb.Name+" "+strings.Join(lb.VIPs, ","))
	}
	if diff := cmp.Diff([]string{owner.Name + " " + oldVIP[0], impostor.Name + " 198.18.100.2"}, names); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	e.sim.ResetCounters()
	e.ensure(t, owner)
	if w := e.sim.Writes(); w != 0 {
		t.Errorf("Ensure after the takeover wrote %d times, want 0", w)
	}
}

// An Ingress's and a Gateway's L7 load balancer under its old name: its
// virtuals swapped on their destinations, the old policies, profiles,
// certificates and pools deleted.
func TestProvider_takesAnL7LoadBalancerOverFromItsOldName(t *testing.T) {
	for _, lb := range []*lbmodel.LoadBalancer{ingressLB(), gatewayLB(t)} {
		t.Run(lb.Name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			old := providertest.AsLegacy(testCluster, lb)
			oldVIP := e.ensure(t, old).VIPs
			if vips := e.ensure(t, lb).VIPs; !slices.Equal(vips, oldVIP) {
				t.Errorf("VIP %v, want the old %v", vips, oldVIP)
			}
			st := e.sim.Dump()
			var left []string
			for _, p := range st.Pools {
				left = append(left, p.FullPath)
			}
			for _, v := range st.Virtuals {
				left = append(left, v.FullPath)
			}
			for _, p := range st.Policies {
				left = append(left, p.FullPath)
			}
			for _, p := range st.ClientSSLProfiles {
				left = append(left, p.FullPath)
			}
			for _, n := range left {
				if strings.Contains(n, "/"+old.Name) {
					t.Errorf("%s of the old name is left", n)
				}
			}
			if len(st.Virtuals) != len(lb.Listeners) {
				t.Errorf("%d virtuals, want %d", len(st.Virtuals), len(lb.Listeners))
			}
		})
	}
}
