package haproxy

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nodeportlocal/npl/edge/haproxy"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/edgebed"
)

// serverState returns the state HAProxy's worker holds for server name of
// backend on edge e ("show servers state").
func serverState(ctx context.Context, e *edgebed.EdgeHost, backend, name string) (haproxy.ServerState, error) {
	sts, err := haproxy.ShowServersState(ctx, e.AdminSocket())
	if err != nil {
		return haproxy.ServerState{}, err
	}
	for _, s := range sts {
		if s.Backend == backend && s.Name == name {
			return s, nil
		}
	}
	return haproxy.ServerState{}, fmt.Errorf("backend %s has no server %s", backend, name)
}

// waitServerUp waits until HAProxy's health check says server name of
// backend is up (want) or down.
func waitServerUp(t *testing.T, e *edgebed.EdgeHost, backend, name string, want bool) {
	t.Helper()
	waitForCond(t, 10*time.Second, fmt.Sprintf("HAProxy's check to mark %s/%s up=%v", backend, name, want), func() (bool, error) {
		s, err := serverState(context.Background(), e, backend, name)
		return err == nil && s.Up == want, err
	})
}

// sessionsDelta is how many connections each server of backend took
// between two ServerSessions readings.
func sessionsDelta(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for name, n := range after {
		d[name] = n - before[name]
	}
	return d
}

// TestEdge_healthCheckTakesAMemberThatStopsAnsweringOutAndBackIn: each
// member has its own health check (the bed's npl-edge runs with
// --check-interval 300ms --check-fall 1 --check-rise 1, so one failed or
// passed check flips it). A member whose server stops answering (its port
// refuses connections) is marked DOWN in HAProxy's runtime state while the
// edge's model keeps it enabled (the check, not npl, takes it out), takes
// no request of N through the VIP (HAProxy's per-server session counters
// and the answers agree), none fails; once it answers again it is UP and
// takes its share. No reload either way.
func TestEdge_healthCheckTakesAMemberThatStopsAnsweringOutAndBackIn(t *testing.T) {
	b, bs := newBed(t)
	p := openProvider(t, b, b.ProviderSection(testCluster))
	ctx := context.Background()
	members := startBackends(t, bs, "web", 3)
	lb := model("web", 80, members)
	st, err := p.Ensure(ctx, lb)
	if err != nil {
		t.Fatal(err)
	}
	e, pool := b.Edges[0], lb.Listeners[0].Pool.Name
	if err := e.WaitUp(ctx, pool, 3); err != nil {
		t.Fatal(err)
	}
	url := edgebed.URL(st.VIPs[0], 80)
	before := status(t, b)
	down := members[1]
	downName := haproxy.ServerName(down)

	// count sends n requests through the VIP and returns who answered and
	// the connections each server took meanwhile.
	const n = 60
	count := func() (map[string]int, map[string]int64) {
		t.Helper()
		s0, err := e.ServerSessions(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		got := answers(t, b, url, n)
		s1, err := e.ServerSessions(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		return got, sessionsDelta(s0, s1)
	}

	bs.StopBackend(down.Port)
	waitServerUp(t, e, pool, downName, false)
	if s, _ := serverState(ctx, e, pool, downName); !s.Enabled() {
		t.Fatalf("server %s is out of the rotation by its admin state %#x, want only its check down", downName, s.AdminState)
	}
	got, sessions := count()
	t.Logf("web-1 stopped, DOWN: %d requests, 0 failed, answered %v, connections per server %v", n, got, sessions)
	if got["web-1"] != 0 || sessions[downName] != 0 {
		t.Fatalf("a DOWN member took requests: answered %v, connections per server %v", got, sessions)
	}
	if !slices.Equal(names(got), []string{"web-0", "web-2"}) {
		t.Fatalf("%d requests answered by %v, want web-0 and web-2", n, got)
	}

	if err := bs.RestartBackend(down.Port); err != nil {
		t.Fatal(err)
	}
	waitServerUp(t, e, pool, downName, true)
	got, sessions = count()
	t.Logf("web-1 answers again, UP: %d requests, 0 failed, answered %v, connections per server %v", n, got, sessions)
	if !slices.Equal(names(got), []string{"web-0", "web-1", "web-2"}) || sessions[downName] == 0 {
		t.Fatalf("after it came back UP: answered %v, connections per server %v; want web-1 among them", got, sessions)
	}
	after := status(t, b)
	if after.Reloads != before.Reloads {
		t.Errorf("the health checks reloaded HAProxy %d times", after.Reloads-before.Reloads)
	}
	// The model is unchanged: the member stayed enabled on the edge.
	if lst := listOne(t, p, lb.Name); !slices.Equal(lst.Listeners[0].Pool.Members, lbmodel.SortMembers(slices.Clone(members))) {
		t.Errorf("List after the check cycle: %+v, want the members as applied %+v", lst.Listeners[0].Pool.Members, members)
	}
}
