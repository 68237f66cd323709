package inspect

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/lbmodel"
)

// A pool whose policy differs from the provider's is drift, like members
// that differ, and names the fields; the drain is npl-lbsync's own.
func TestCompare_policyDrift(t *testing.T) {
	pool := func(name string, p *lbmodel.Policy) lbmodel.Listener {
		return lbmodel.Listener{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: name,
			Members: []lbmodel.Member{{IP: "198.18.0.10", Port: 61000, Enabled: true}}, Policy: p}}
	}
	hc := &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz"}
	want := &lbmodel.Policy{HealthCheck: hc, SlowStartSeconds: 30, DrainSeconds: ptr.To[int32](5)}
	expected := []*lbmodel.LoadBalancer{{Name: "c--ns-web", Service: "ns/web", Listeners: []lbmodel.Listener{pool("same", want)}},
		{Name: "c--ns-api", Service: "ns/api", Listeners: []lbmodel.Listener{pool("lost", want)}}}
	actual := []lbmodel.LoadBalancer{
		{Name: "c--ns-web", Listeners: []lbmodel.Listener{pool("same", &lbmodel.Policy{HealthCheck: hc, SlowStartSeconds: 30})}},
		{Name: "c--ns-api", Listeners: []lbmodel.Listener{pool("lost", &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP}})}},
	}
	got := map[string]Pool{}
	for _, p := range Compare(expected, actual).Pools {
		got[p.Name] = p
	}
	if p := got["same"]; p.State != StateInSync || len(p.PolicyDrift) != 0 || p.Policy != want {
		t.Errorf("same: state %s, drift %v, policy %+v", p.State, p.PolicyDrift, p.Policy)
	}
	if p := got["lost"]; p.State != StateDrift || !cmp.Equal(p.PolicyDrift, []string{"healthCheck", "slowStartSeconds"}) {
		t.Errorf("lost: state %s, drift %v", p.State, p.PolicyDrift)
	}
}

// The expected models hold what the provider expresses of a policy, as
// providers.Validated hands it over.
func TestSettings_asProvided(t *testing.T) {
	lb := &lbmodel.LoadBalancer{Name: "c--ns-web", Service: "ns/web", Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP,
		Pool: lbmodel.Pool{Name: "p", Policy: &lbmodel.Policy{SlowStartSeconds: 10, Algorithm: &lbmodel.Algorithm{Type: lbmodel.RoundRobin}}}}}}
	if got := (Settings{}).asProvided(lb); got != lb {
		t.Error("without capabilities the model changed")
	}
	caps := &lbmodel.PolicyCapabilities{TCP: lbmodel.PolicySupport{MaxConnections: true}}
	if got := (Settings{Capabilities: caps}).asProvided(lb); got.Listeners[0].Pool.Policy != nil {
		t.Errorf("policy %+v, want none: round robin is the default, slow start not expressed", got.Listeners[0].Pool.Policy)
	}
}

func TestDescribePolicy(t *testing.T) {
	for p, want := range map[*lbmodel.Policy]string{
		nil: "<default>",
		{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 10800},
			HealthCheck:      &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Host: "web", Path: "/healthz", IntervalSeconds: 5},
			Algorithm:        &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashHeader, HashName: "X-User"},
			SlowStartSeconds: 30, DrainSeconds: ptr.To[int32](0), MaxConnectionsPerMember: 100}: "persist=SourceIP/10800s,check=HTTP:web/healthz/5s,lb=ConsistentHash(Header:X-User),slowstart=30s,drain=0s,maxconn=100",
	} {
		if got := DescribePolicy(p); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
