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

// raceEdge is an edge whose answers the test orders: the list of a second
// load balancer's Ensure is read before the first one's PUT lands, and
// answered only after the first Ensure returned.
type raceEdge struct {
	mu       sync.Mutex
	served   map[string]providers.LoadBalancer
	putting  chan struct{} // closed when the first PUT arrives
	listed   chan struct{} // closed when the list is read
	released chan struct{} // closed by the test: answer the list
}

func (f *raceEdge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	answer := func(status int, v any) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/loadbalancers"):
		f.mu.Lock()
		var l api.List
		for _, lb := range f.served {
			l.LoadBalancers = append(l.LoadBalancers, lb)
		}
		f.mu.Unlock()
		select {
		case <-f.putting: // the second Ensure: hold its answer
			close(f.listed)
			<-f.released
		default:
		}
		answer(http.StatusOK, l)
	case r.Method == http.MethodGet:
		answer(http.StatusNotFound, api.Error{Error: "not served"})
	case r.Method == http.MethodPut:
		var req api.LoadBalancerRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			answer(http.StatusBadRequest, api.Error{Error: err.Error()})
			return
		}
		if name == "c1--ns-a" {
			close(f.putting)
			<-f.listed
		}
		f.mu.Lock()
		for other, lb := range f.served {
			if other != name && lb.VIPs[0] == req.VIPs[0] {
				f.mu.Unlock()
				answer(http.StatusConflict, api.Error{Error: "VIP already served"})
				return
			}
		}
		f.served[name] = req.LoadBalancer
		f.mu.Unlock()
		answer(http.StatusOK, api.EnsureResult{Changed: true})
	}
}

// TestEnsure_concurrentNewLoadBalancersGetDistinctVIPs: B reads the edges
// before A's PUT lands, and chooses after A's Ensure succeeded (its VIP no
// longer reserved but applied): B must not take A's VIP.
func TestEnsure_concurrentNewLoadBalancersGetDistinctVIPs(t *testing.T) {
	edge := &raceEdge{served: map[string]providers.LoadBalancer{}, putting: make(chan struct{}), listed: make(chan struct{}),
		released: make(chan struct{})}
	srv := httptest.NewTLSServer(edge)
	defer srv.Close()
	p := newProvider(&Config{Edges: []string{srv.URL},
		common: providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("198.18.200.0/24")}}}, srv.Client())
	ctx := context.Background()
	lb := func(name string) *providers.LoadBalancer {
		return &providers.LoadBalancer{Name: name, Service: "ns/x", Listeners: []providers.Listener{{Port: 443, Protocol: providers.TCP,
			Pool: providers.Pool{Name: providers.PoolName(name, providers.TCP, 443)}}}}
	}
	type result struct {
		st  providers.Status
		err error
	}
	a, b := make(chan result, 1), make(chan result, 1)
	go func() { st, err := p.Ensure(ctx, lb("c1--ns-a")); a <- result{st, err} }()
	<-edge.putting
	go func() { st, err := p.Ensure(ctx, lb("c1--ns-b")); b <- result{st, err} }()
	ra := <-a
	close(edge.released)
	rb := <-b
	if ra.err != nil || rb.err != nil {
		t.Fatalf("Ensure a = %v, b = %v", ra.err, rb.err)
	}
	if ra.st.VIPs[0] == rb.st.VIPs[0] {
		t.Errorf("both load balancers got VIP %s", ra.st.VIPs[0])
	}
}

// TestEnsure_conflictDropsTheReservedVIP: a VIP an edge refuses (409) is
// not kept for the next Ensure, which reads the edges and chooses again.
func TestEnsure_conflictDropsTheReservedVIP(t *testing.T) {
	edge := &fakeEdge{served: map[string]providers.LoadBalancer{}, conflict: true}
	srv := httptest.NewTLSServer(edge)
	defer srv.Close()
	p := newProvider(&Config{Edges: []string{srv.URL},
		common: providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("198.18.200.0/24")}}}, srv.Client())
	lb := &providers.LoadBalancer{Name: "c1--ns-web", Service: "ns/web", Listeners: []providers.Listener{{Port: 80, Protocol: providers.TCP,
		Pool: providers.Pool{Name: providers.PoolName("c1--ns-web", providers.TCP, 80)}}}}
	if _, err := p.Ensure(context.Background(), lb); err == nil {
		t.Fatal("Ensure with a conflicting edge succeeded")
	}
	p.mu.Lock()
	_, reserved := p.reserved[lb.Name]
	p.mu.Unlock()
	if reserved {
		t.Error("the VIP the edge refused is still reserved")
	}
}
