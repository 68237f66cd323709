package haproxy

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeportlocal/npl/edge/api"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

// fakeEdge answers the edge API from a map of served load balancers and
// records the calls; conflict makes every PUT answer 409. The real edge is
// tested in test/haproxy; this one counts calls.
type fakeEdge struct {
	mu       sync.Mutex
	served   map[string]lbmodel.LoadBalancer
	calls    []string
	conflict bool
	// unsupported is what every PUT answers it does not serve, and
	// reason why (empty: an edge before EnsureResult.Reason).
	unsupported []string
	reason      string
	// replaces are the Replaces of the PUTs.
	replaces []string
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
			l.LoadBalancers = append(l.LoadBalancers, api.FromModel(&lb))
		}
		answer(http.StatusOK, l)
	case r.Method == http.MethodGet:
		lb, ok := f.served[name]
		if !ok {
			answer(http.StatusNotFound, api.Error{Error: "not served"})
			return
		}
		answer(http.StatusOK, api.FromModel(&lb))
	case r.Method == http.MethodPut && f.conflict:
		answer(http.StatusConflict, api.Error{Error: "VIP and port already served"})
	case r.Method == http.MethodPut:
		var req api.LoadBalancerRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			answer(http.StatusBadRequest, api.Error{Error: err.Error()})
			return
		}
		f.served[name] = *req.Model()
		if old, ok := f.served[req.Replaces]; ok && lbmodel.SameOwner(&old, req.Model()) {
			delete(f.served, req.Replaces)
		}
		f.replaces = append(f.replaces, req.Replaces)
		answer(http.StatusOK, api.EnsureResult{Changed: true, Unsupported: f.unsupported, Reason: f.reason})
	case r.Method == http.MethodDelete:
		delete(f.served, name)
		answer(http.StatusOK, api.DeleteResult{Deleted: true})
	}
}

// A load balancer an edge serves under the name npl-lbsync 0.x gave it
// (namespace and name joined with "-") is taken over by its owner: the PUT
// says it replaces it, and it keeps its VIP. Another Service whose old name
// was the same (team/a-x for team-a/x) gets a VIP of its own and replaces
// nothing.
func TestEnsure_takesOverTheOldNameOfItsOwnerOnly(t *testing.T) {
	const old = "c1--team-a-x"
	edge := &fakeEdge{served: map[string]lbmodel.LoadBalancer{old: {Name: old, Service: "team-a/x", VIPs: []string{"198.18.200.7"},
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: old + "-TCP-80", Members: []lbmodel.Member{}}}}}}}
	srv := httptest.NewTLSServer(edge)
	defer srv.Close()
	p := newProvider(&Config{Edges: []string{srv.URL},
		common: providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("198.18.200.0/24")}}}, srv.Client())
	ctx := context.Background()
	model := func(ns, svc string) *lbmodel.LoadBalancer {
		name := lbmodel.LoadBalancerName("c1", ns, svc)
		return &lbmodel.LoadBalancer{Name: name, Service: ns + "/" + svc, Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP,
			Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, 80), Members: []lbmodel.Member{}}}}}
	}
	st, err := p.Ensure(ctx, model("team", "a-x"))
	if err != nil || slices.Contains(st.VIPs, "198.18.200.7") {
		t.Fatalf("the other Service: %v, %v; want a VIP of its own", st, err)
	}
	st, err = p.Ensure(ctx, model("team-a", "x"))
	if err != nil || !slices.Equal(st.VIPs, []string{"198.18.200.7"}) {
		t.Fatalf("the owner: %v, %v; want its VIP 198.18.200.7", st, err)
	}
	edge.mu.Lock()
	defer edge.mu.Unlock()
	if want := []string{"", old}; !slices.Equal(edge.replaces, want) {
		t.Errorf("the PUTs replaced %q, want %q", edge.replaces, want)
	}
	if _, ok := edge.served[old]; ok || len(edge.served) != 2 {
		t.Errorf("served %v: want the two new names only", slices.Sorted(maps.Keys(edge.served)))
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
	edge := &fakeEdge{served: map[string]lbmodel.LoadBalancer{}}
	srv := httptest.NewTLSServer(edge)
	defer srv.Close()
	p := newProvider(&Config{Edges: []string{srv.URL},
		common: providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("198.18.200.0/24")}}}, srv.Client())
	ctx := context.Background()
	lb := func(members ...lbmodel.Member) *lbmodel.LoadBalancer {
		return &lbmodel.LoadBalancer{Name: "c1--ns-web", Service: "ns/web", Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP,
			Pool: lbmodel.Pool{Name: lbmodel.PoolName("c1--ns-web", lbmodel.TCP, 80), Members: members}}}}
	}
	const path = "/v1/clusters/c1/loadbalancers"
	m1, m2 := lbmodel.Member{IP: "198.18.0.10", Port: 61000, Enabled: true}, lbmodel.Member{IP: "198.18.0.11", Port: 61000, Enabled: true}

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
	if err := p.Delete(ctx, "c1--ns-web", lbmodel.L4); err != nil {
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
	served   map[string]lbmodel.LoadBalancer
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
			l.LoadBalancers = append(l.LoadBalancers, api.FromModel(&lb))
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
		f.served[name] = *req.Model()
		f.mu.Unlock()
		answer(http.StatusOK, api.EnsureResult{Changed: true})
	}
}

// TestEnsure_concurrentNewLoadBalancersGetDistinctVIPs: B reads the edges
// before A's PUT lands, and chooses after A's Ensure succeeded (its VIP no
// longer reserved but applied): B must not take A's VIP.
func TestEnsure_concurrentNewLoadBalancersGetDistinctVIPs(t *testing.T) {
	edge := &raceEdge{served: map[string]lbmodel.LoadBalancer{}, putting: make(chan struct{}), listed: make(chan struct{}),
		released: make(chan struct{})}
	srv := httptest.NewTLSServer(edge)
	defer srv.Close()
	p := newProvider(&Config{Edges: []string{srv.URL},
		common: providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("198.18.200.0/24")}}}, srv.Client())
	ctx := context.Background()
	lb := func(name string) *lbmodel.LoadBalancer {
		return &lbmodel.LoadBalancer{Name: name, Service: "ns/x", Listeners: []lbmodel.Listener{{Port: 443, Protocol: lbmodel.TCP,
			Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, 443)}}}}
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
	edge := &fakeEdge{served: map[string]lbmodel.LoadBalancer{}, conflict: true}
	srv := httptest.NewTLSServer(edge)
	defer srv.Close()
	p := newProvider(&Config{Edges: []string{srv.URL},
		common: providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("198.18.200.0/24")}}}, srv.Client())
	lb := &lbmodel.LoadBalancer{Name: "c1--ns-web", Service: "ns/web", Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP,
		Pool: lbmodel.Pool{Name: lbmodel.PoolName("c1--ns-web", lbmodel.TCP, 80)}}}}
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

// twoEdges starts two fake edges and a provider of both.
func twoEdges(t *testing.T) (*provider, [2]*fakeEdge, [2]string) {
	t.Helper()
	var edges [2]*fakeEdge
	var urls [2]string
	var client *http.Client
	for i := range edges {
		edges[i] = &fakeEdge{served: map[string]lbmodel.LoadBalancer{}}
		srv := httptest.NewTLSServer(edges[i])
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
		if client == nil {
			client = srv.Client()
		} else {
			// Both test servers use the same certificate.
			client.Transport.(*http.Transport).TLSClientConfig.RootCAs.AddCert(srv.Certificate())
		}
	}
	p := newProvider(&Config{Edges: urls[:],
		common: providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("198.18.200.0/24")}}}, client)
	return p, edges, urls
}

// TestEnsure_warningsOfEveryEdgeNameIt: each edge that does not serve a
// UDP listener is said so, naming it and its reason (an edge that gives
// none serves no UDP), whichever of the edges it is.
func TestEnsure_warningsOfEveryEdgeNameIt(t *testing.T) {
	const noIPv6 = "net.ipv6.conf.all.forwarding is 0"
	for _, tc := range []struct {
		name   string
		off    []int // the edges that do not serve UDP/53
		reason string
	}{
		{"none", nil, ""},
		{"the first", []int{0}, ""},
		{"the second", []int{1}, ""},
		{"both", []int{0, 1}, ""},
		{"the second, with its reason", []int{1}, noIPv6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, edges, urls := twoEdges(t)
			for _, i := range tc.off {
				edges[i].unsupported, edges[i].reason = []string{"UDP/53"}, tc.reason
			}
			lb := &lbmodel.LoadBalancer{Name: "c1--ns-dns", Service: "ns/dns", Listeners: []lbmodel.Listener{{Port: 53, Protocol: lbmodel.UDP,
				Pool: lbmodel.Pool{Name: lbmodel.PoolName("c1--ns-dns", lbmodel.UDP, 53)}}}}
			st, err := p.Ensure(context.Background(), lb)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Warnings) != len(tc.off) {
				t.Fatalf("warnings %q, want %d", st.Warnings, len(tc.off))
			}
			want := tc.reason
			if want == "" {
				want = api.ReasonNoUDP
			}
			for k, i := range tc.off {
				if w := st.Warnings[k]; !strings.Contains(w, "edge "+urls[i]+" ") || !strings.Contains(w, "UDP/53") || !strings.Contains(w, want) {
					t.Errorf("warning %q, want it to name edge %s, UDP/53 and %q", w, urls[i], want)
				}
			}
		})
	}
}

// TestList_loadBalancerTheEdgesServeDifferently: List gives a load balancer
// once; alike on both edges it is their copy, else every member the edges
// do not serve alike is listed enabled and disabled, so that no model
// equals the pool (nplctl pools says drift), whichever edge lags.
func TestList_loadBalancerTheEdgesServeDifferently(t *testing.T) {
	m := func(last byte, enabled bool) lbmodel.Member {
		return lbmodel.Member{IP: netip.AddrFrom4([4]byte{198, 18, 0, last}).String(), Port: 61000, Enabled: enabled}
	}
	pool := lbmodel.PoolName("c1--ns-web", lbmodel.TCP, 80)
	lb := func(members ...lbmodel.Member) *lbmodel.LoadBalancer {
		return &lbmodel.LoadBalancer{Name: "c1--ns-web", Service: "ns/web", VIPs: []string{"198.18.200.1"},
			Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: pool, Members: members}}}}
	}
	synced := lb(m(10, true), m(11, true))
	for _, tc := range []struct {
		name  string
		edges [2]*lbmodel.LoadBalancer
		want  []lbmodel.Member
	}{
		{"alike", [2]*lbmodel.LoadBalancer{synced, synced}, []lbmodel.Member{m(10, true), m(11, true)}},
		{"the second lacks a member", [2]*lbmodel.LoadBalancer{synced, lb(m(10, true))},
			[]lbmodel.Member{m(10, true), m(11, false), m(11, true)}},
		{"the first lacks a member", [2]*lbmodel.LoadBalancer{lb(m(10, true)), synced},
			[]lbmodel.Member{m(10, true), m(11, false), m(11, true)}},
		{"the second keeps a removed member", [2]*lbmodel.LoadBalancer{synced, lb(m(10, true), m(11, true), m(12, true))},
			[]lbmodel.Member{m(10, true), m(11, true), m(12, false), m(12, true)}},
		{"the second has not drained a member", [2]*lbmodel.LoadBalancer{lb(m(10, true), m(11, false)), synced},
			[]lbmodel.Member{m(10, true), m(11, false), m(11, true)}},
		{"the second lacks the load balancer", [2]*lbmodel.LoadBalancer{synced, nil},
			[]lbmodel.Member{m(10, false), m(10, true), m(11, false), m(11, true)}},
		{"the first lacks the load balancer", [2]*lbmodel.LoadBalancer{nil, synced},
			[]lbmodel.Member{m(10, false), m(10, true), m(11, false), m(11, true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, edges, _ := twoEdges(t)
			for i, served := range tc.edges {
				if served != nil {
					edges[i].served[served.Name] = *served.Clone()
				}
				other := lb(m(20, true))
				other.Name, other.Service = "c1--ns-other", "ns/other"
				edges[i].served[other.Name] = *other
			}
			lbs, err := p.List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(lbs) != 2 || lbs[0].Name != "c1--ns-other" || lbs[1].Name != "c1--ns-web" {
				t.Fatalf("List = %+v, want c1--ns-other and c1--ns-web once each", lbs)
			}
			if diff := cmp.Diff(*lb(m(20, true)), lbs[0], cmpopts.IgnoreFields(lbmodel.LoadBalancer{}, "Name", "Service")); diff != "" {
				t.Errorf("the load balancer both edges serve alike (-want +got):\n%s", diff)
			}
			got := lbs[1]
			if diff := cmp.Diff(tc.want, got.Listeners[0].Pool.Members); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
			if got.Name != synced.Name || !slices.Equal(got.VIPs, synced.VIPs) || len(got.Listeners) != 1 {
				t.Errorf("List gave %+v, want the edges' load balancer", got)
			}
			// In sync only when the edges agree: a pool a model can equal.
			if equal := cmp.Equal(got.Listeners[0].Pool.Members, lbmodel.SortMembers(slices.Clone(got.Listeners[0].Pool.Members))); equal != (tc.name == "alike") {
				t.Errorf("a model could equal the pool: %v, want %v", equal, tc.name == "alike")
			}
		})
	}
}
