package haproxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/providers"
)

// fakeEdge answers the edge API from a map of served load balancers and
// records the calls; conflict makes every PUT answer 409. The real edge is
// tested in test/edge; this one counts calls.
type fakeEdge struct {
	mu       sync.Mutex
	served   map[string]providers.LoadBalancer
	calls    []string
	conflict bool
}

func (f *fakeEdge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	name := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	answer := func(status int, v any) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/loadbalancers"):
		var l api.List
		for _, lb := range f.served {
			l.LoadBalancers = append(l.LoadBalancers, lb)
		}
		answer(http.StatusOK, l)
	case r.Method == http.MethodGet:
		lb, ok := f.served[name]
		if !ok {
			answer(http.StatusNotFound, api.Error{Error: "not served"})
			return
		}
		answer(http.StatusOK, lb)
	case r.Method == http.MethodPut && f.conflict:
		answer(http.StatusConflict, api.Error{Error: "VIP and port already served"})
	case r.Method == http.MethodPut:
		var req api.LoadBalancerRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			answer(http.StatusBadRequest, api.Error{Error: err.Error()})
			return
		}
		f.served[name] = req.LoadBalancer
		answer(http.StatusOK, api.EnsureResult{Changed: true})
	case r.Method == http.MethodDelete:
		delete(f.served, name)
		answer(http.StatusOK, api.DeleteResult{Deleted: true})
	}
}

// takeCalls returns the calls since the last take.
func (f *fakeEdge) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func TestEnsure_memberChangeIsOneCallPerEdge(t *testing.T) {
	edge := &fakeEdge{served: map[string]providers.LoadBalancer{}}
	srv := httptest.NewTLSServer(edge)
	defer srv.Close()
	p := newProvider(&Config{Edges: []string{srv.URL},
		common: providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("198.18.200.0/24")}}}, srv.Client())
	ctx := context.Background()
	lb := func(members ...providers.Member) *providers.LoadBalancer {
		return &providers.LoadBalancer{Name: "c1--ns-web", Service: "ns/web", Listeners: []providers.Listener{{Port: 80, Protocol: providers.TCP,
			Pool: providers.Pool{Name: providers.PoolName("c1--ns-web", providers.TCP, 80), Members: members}}}}
	}
	const path = "/v1/clusters/c1/loadbalancers"
	m1, m2 := providers.Member{IP: "198.18.0.10", Port: 61000, Enabled: true}, providers.Member{IP: "198.18.0.11", Port: 61000, Enabled: true}

	// A new load balancer: the edges are read (its VIP, then the VIPs in
	// use) before the VIP is chosen.
	st, err := p.Ensure(ctx, lb(m1))
	if err != nil || !slices.Equal(st.VIPs, []string{"198.18.200.1"}) {
		t.Fatalf("Ensure = %v, %v; want VIP 198.18.200.1", st, err)
	}
	if got, want := edge.takeCalls(), []string{"GET " + path + "/c1--ns-web", "GET " + path, "PUT " + path + "/c1--ns-web"}; !slices.Equal(got, want) {
		t.Errorf("calls of the first Ensure = %q, want %q", got, want)
	}
	// A member change of an applied load balancer: one PUT, the same VIP.
	st, err = p.Ensure(ctx, lb(m1, m2))
	if err != nil || !slices.Equal(st.VIPs, []string{"198.18.200.1"}) {
		t.Fatalf("Ensure = %v, %v; want VIP 198.18.200.1", st, err)
	}
	if got, want := edge.takeCalls(), []string{"PUT " + path + "/c1--ns-web"}; !slices.Equal(got, want) {
		t.Errorf("calls of a member change = %q, want %q", got, want)
	}
	// A failed call forgets the VIP: the next Ensure reads the edges again
	// (and keeps the VIP they serve).
	edge.mu.Lock()
	edge.conflict = true
	edge.mu.Unlock()
	if _, err := p.Ensure(ctx, lb(m1)); err == nil || !strings.Contains(err.Error(), "already served") {
		t.Fatalf("Ensure with a conflicting edge = %v, want its error", err)
	}
	edge.takeCalls()
	edge.mu.Lock()
	edge.conflict = false
	edge.mu.Unlock()
	st, err = p.Ensure(ctx, lb(m1))
	if err != nil || !slices.Equal(st.VIPs, []string{"198.18.200.1"}) {
		t.Fatalf("Ensure after a failure = %v, %v; want VIP 198.18.200.1", st, err)
	}
	if got, want := edge.takeCalls(), []string{"GET " + path + "/c1--ns-web", "PUT " + path + "/c1--ns-web"}; !slices.Equal(got, want) {
		t.Errorf("calls after a failure = %q, want %q", got, want)
	}
	// Deleted, then created again: the edges are read again.
	if err := p.Delete(ctx, "c1--ns-web", providers.L4); err != nil {
		t.Fatal(err)
	}
	edge.takeCalls()
	if _, err := p.Ensure(ctx, lb(m1)); err != nil {
		t.Fatal(err)
	}
	if got := edge.takeCalls(); len(got) != 3 {
		t.Errorf("calls of an Ensure after Delete = %q, want the edges read first", got)
	}
}
