package inspect

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeportlocal/npl/lbmodel"
)

func TestCompare_statesAndDifferences(t *testing.T) {
	m := func(ip string, port int32, enabled bool) lbmodel.Member {
		return lbmodel.Member{IP: ip, Port: port, Enabled: enabled}
	}
	lb := func(name string, members ...lbmodel.Member) *lbmodel.LoadBalancer {
		return &lbmodel.LoadBalancer{Name: "c--ns-" + name, Service: "ns/" + name, Listeners: []lbmodel.Listener{{
			Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "c--ns-" + name + "-TCP-80", Members: members}}}}
	}
	expected := []*lbmodel.LoadBalancer{
		lb("same", m("198.18.0.10", 61000, true)),
		lb("drift", m("198.18.0.10", 61000, true), m("198.18.0.11", 61000, true)),
		lb("disabled", m("198.18.0.10", 61000, false)),
		lb("gone", m("198.18.0.10", 61000, true)),
		lb("twice", m("198.18.0.10", 61000, true)),
	}
	actual := []lbmodel.LoadBalancer{
		// Listed both ways: load balancers that disagree (two edges).
		*lb("twice", m("198.18.0.10", 61000, true), m("198.18.0.10", 61000, false)),
		*lb("same", m("198.18.0.10", 61000, true)),
		*lb("drift", m("198.18.0.11", 61000, true), m("198.18.0.12", 61000, true)),
		*lb("disabled", m("198.18.0.10", 61000, true)),
	}
	got := map[string]Pool{}
	for _, p := range Compare(expected, actual).Pools {
		got[p.Service] = p
	}
	want := map[string]struct {
		state          string
		missing, extra []string
	}{
		"ns/same":     {StateInSync, nil, nil},
		"ns/drift":    {StateDrift, []string{"198.18.0.10:61000"}, []string{"198.18.0.12:61000"}},
		"ns/disabled": {StateDrift, []string{"198.18.0.10:61000 (disabled)"}, []string{"198.18.0.10:61000"}},
		"ns/gone":     {StateMissing, []string{"198.18.0.10:61000"}, nil},
		"ns/twice":    {StateDrift, nil, []string{"198.18.0.10:61000 (disabled)"}},
	}
	for svc, w := range want {
		p := got[svc]
		if p.State != w.state || !cmp.Equal(p.Missing, w.missing) || !cmp.Equal(p.Extra, w.extra) {
			t.Errorf("%s: state %s missing %v extra %v, want %s %v %v", svc, p.State, p.Missing, p.Extra, w.state, w.missing, w.extra)
		}
	}
	if Compare(expected[:1], actual).InSync() != true || Compare(expected, actual).InSync() {
		t.Error("InSync disagrees with the states")
	}
}

func TestMemberAddress_bracketsIPv6(t *testing.T) {
	for m, want := range map[Member]string{
		{IP: "198.18.0.10", Port: 61000}:     "198.18.0.10:61000",
		{IP: "fd00:198:18::10", Port: 61000}: "[fd00:198:18::10]:61000",
	} {
		if got := m.Address(); got != want {
			t.Errorf("%+v.Address() = %q, want %q", m, got, want)
		}
	}
}
