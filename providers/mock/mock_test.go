package mock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

const cluster = "c1"

func common(pool ...string) providers.Common {
	c := providers.Common{ClusterName: cluster}
	for _, p := range pool {
		c.VIPPool = append(c.VIPPool, netip.MustParsePrefix(p))
	}
	return c
}

func newMock(t *testing.T, cfg Config) *Mock {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// model is a desired load balancer of cluster c1 with one TCP/80 listener.
func model(svc string, members ...lbmodel.Member) *lbmodel.LoadBalancer {
	name := lbmodel.LoadBalancerName(cluster, "shop", svc)
	if members == nil {
		members = []lbmodel.Member{}
	}
	return &lbmodel.LoadBalancer{
		Name:    name,
		Service: "shop/" + svc,
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.TCP,
			Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, 80), Members: members}}},
	}
}

func member(ip string, port int32) lbmodel.Member {
	return lbmodel.Member{IP: ip, Port: port, Enabled: true}
}

func withVIP(lb *lbmodel.LoadBalancer, vip string) lbmodel.LoadBalancer {
	out := *lb.Clone()
	out.VIPs = []string{vip}
	return out
}

func mustEnsure(t *testing.T, m *Mock, lb *lbmodel.LoadBalancer) []string {
	t.Helper()
	st, err := providers.Validated(m).Ensure(context.Background(), lb)
	if err != nil {
		t.Fatalf("Ensure %s: %v", lb.Name, err)
	}
	return st.VIPs
}

func TestMock_ensureStoresTheModelWithAVIP(t *testing.T) {
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	desired := model("web", member("198.18.0.12", 61000), member("198.18.0.11", 61001))
	vips := mustEnsure(t, m, desired)
	if diff := cmp.Diff([]string{"203.0.113.1"}, vips); diff != "" {
		t.Errorf("VIPs (-want +got):\n%s", diff)
	}
	want := withVIP(model("web", member("198.18.0.11", 61001), member("198.18.0.12", 61000)), "203.0.113.1")
	got, err := m.List(context.Background())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{want}, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if desired.Listeners[0].Pool.Members[0].IP != "198.18.0.12" || desired.VIPs != nil {
		t.Errorf("Ensure modified its argument: %+v", desired)
	}
}

func TestMock_noOpEnsureCountsNoWrite(t *testing.T) {
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	mustEnsure(t, m, model("web", member("198.18.0.11", 61000)))
	first := mustEnsure(t, m, model("web", member("198.18.0.11", 61000)))
	// The same members in another order are the same model.
	mustEnsure(t, m, model("web", member("198.18.0.11", 61000), member("198.18.0.11", 61000)))
	mustEnsure(t, m, model("web", member("198.18.0.11", 61000), member("198.18.0.12", 61000)))

	if diff := cmp.Diff([]string{"203.0.113.1"}, first); diff != "" {
		t.Errorf("no-op Ensure VIPs (-want +got):\n%s", diff)
	}
	name := lbmodel.LoadBalancerName(cluster, "shop", "web")
	want := Counters{Ensure: 4, Writes: 2, PerLoadBalancer: map[string]LoadBalancerCounters{
		name: {Ensure: 4, Writes: 2},
	}}
	if diff := cmp.Diff(want, m.Counters()); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
}

func TestMock_vipAllocation(t *testing.T) {
	ctx := context.Background()
	m := newMock(t, Config{Common: common("203.0.113.0/30", "203.0.113.64/32")})

	a := mustEnsure(t, m, model("a"))
	b := mustEnsure(t, m, model("b"))
	aAgain := mustEnsure(t, m, model("a", member("198.18.0.11", 61000)))
	// /30 gives .1 and .2 (network and broadcast are skipped), then the /32.
	if diff := cmp.Diff([][]string{{"203.0.113.1"}, {"203.0.113.2"}, {"203.0.113.1"}}, [][]string{a, b, aAgain}); diff != "" {
		t.Errorf("VIPs: first free, stable per load balancer (-want +got):\n%s", diff)
	}
	c := mustEnsure(t, m, model("c"))
	if diff := cmp.Diff([]string{"203.0.113.64"}, c); diff != "" {
		t.Errorf("VIP from the second prefix (-want +got):\n%s", diff)
	}
	if _, err := providers.Validated(m).Ensure(ctx, model("d")); err == nil || !strings.Contains(err.Error(), "no free VIP") {
		t.Errorf("Ensure with the pool exhausted: err = %v, want no free VIP", err)
	}
	if err := m.Delete(ctx, model("a").Name, lbmodel.L4); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if d := mustEnsure(t, m, model("d")); d[0] != "203.0.113.1" {
		t.Errorf("VIP after Delete released .1: got %v", d)
	}
}

// The Services team-a/x and team/a-x had one load balancer up to 0.x,
// c1--team-a-x: the second's Ensure took the first's VIP and members. Now
// each has its own name, and the load balancer under the old name is taken
// over by the owner it records only, VIP and all.
func TestMock_collidingServicesAndTheTakeoverOfTheOldName(t *testing.T) {
	ctx := context.Background()
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	svc := func(ns, name string, members ...lbmodel.Member) *lbmodel.LoadBalancer {
		lb := model("x", members...)
		lb.Name, lb.Service = lbmodel.LoadBalancerName(cluster, ns, name), ns+"/"+name
		lb.Listeners[0].Pool.Name = lbmodel.PoolName(lb.Name, lbmodel.TCP, 80)
		return lb
	}
	// What 0.x left: team-a/x's load balancer under the old name.
	old := svc("team-a", "x", member("198.18.0.11", 61000))
	old.Name, old.Listeners[0].Pool.Name = "c1--team-a-x", "c1--team-a-x-TCP-80"
	oldVIP := mustEnsure(t, m, old)

	// The other Service: a load balancer and a VIP of its own.
	other := mustEnsure(t, m, svc("team", "a-x", member("198.18.0.12", 61000)))
	if other[0] == oldVIP[0] {
		t.Fatalf("team/a-x got team-a/x's VIP %s", oldVIP[0])
	}
	// The owner: its old load balancer renamed, its VIP kept.
	if got := mustEnsure(t, m, svc("team-a", "x", member("198.18.0.11", 61000))); got[0] != oldVIP[0] {
		t.Errorf("team-a/x's VIP %v, want its old %s", got, oldVIP[0])
	}
	lbs, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, lb := range lbs {
		names = append(names, lb.Name+" "+lb.Listeners[0].Pool.Members[0].IP)
	}
	if diff := cmp.Diff([]string{"c1--team-a_x 198.18.0.11", "c1--team_a-x 198.18.0.12"}, names); diff != "" {
		t.Errorf("load balancers (-want +got):\n%s", diff)
	}
	// Deleting one leaves the other its members.
	if err := m.Delete(ctx, lbmodel.LoadBalancerName(cluster, "team", "a-x"), lbmodel.L4); err != nil {
		t.Fatal(err)
	}
	if lbs, _ := m.List(ctx); len(lbs) != 1 || len(lbs[0].Listeners[0].Pool.Members) != 1 {
		t.Errorf("after deleting team/a-x: %v", lbs)
	}
}

func TestMock_requestedVIP(t *testing.T) {
	ctx := context.Background()
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	web := model("web")
	web.RequestedVIP = "198.51.100.7"
	if got := mustEnsure(t, m, web); got[0] != "198.51.100.7" {
		t.Errorf("requested VIP outside the pool: got %v", got)
	}
	api := model("api")
	api.RequestedVIP = "198.51.100.7"
	if _, err := providers.Validated(m).Ensure(ctx, api); err == nil || !strings.Contains(err.Error(), "in use by c1--shop_web") {
		t.Errorf("Ensure of a VIP in use: err = %v, want in use by c1--shop_web", err)
	}
	// Dropping the request keeps the VIP: it is stable once held.
	if got := mustEnsure(t, m, model("web")); got[0] != "198.51.100.7" {
		t.Errorf("VIP after the request is dropped: got %v", got)
	}
	// Asking for another one moves to it and frees the old one.
	web.RequestedVIP = "203.0.113.5"
	if got := mustEnsure(t, m, web); got[0] != "203.0.113.5" {
		t.Errorf("VIP after a new request: got %v", got)
	}
	api.RequestedVIP = "198.51.100.7"
	if got := mustEnsure(t, m, api); got[0] != "198.51.100.7" {
		t.Errorf("freed VIP not reusable: got %v", got)
	}
	bad := model("bad")
	bad.RequestedVIP = "not-an-ip"
	if _, err := providers.Validated(m).Ensure(ctx, bad); err == nil {
		t.Error("Ensure with an invalid requested VIP succeeded")
	}
}

func TestMock_emptyPoolNeedsARequestedVIP(t *testing.T) {
	m := newMock(t, Config{Common: common()})
	if _, err := providers.Validated(m).Ensure(context.Background(), model("web")); err == nil || !strings.Contains(err.Error(), "VIP pool is empty") {
		t.Errorf("err = %v, want VIP pool is empty", err)
	}
	web := model("web")
	web.RequestedVIP = "203.0.113.9"
	if got := mustEnsure(t, m, web); got[0] != "203.0.113.9" {
		t.Errorf("VIPs = %v", got)
	}
}

func TestMock_rejectsInvalidModels(t *testing.T) {
	foreign := model("web")
	foreign.Name = "c2--shop-web"
	dupListener := model("web")
	dupListener.Listeners = append(dupListener.Listeners, dupListener.Listeners[0])
	sctp := model("web")
	sctp.Listeners[0].Protocol = "SCTP"
	badMember := model("web", lbmodel.Member{IP: "198.18.0.300", Port: 1})
	badPort := model("web", lbmodel.Member{IP: "198.18.0.1", Port: 0})
	tests := []struct {
		name    string
		lb      *lbmodel.LoadBalancer
		wantErr string
	}{
		{"nil", nil, "no load balancer"},
		{"another cluster's name", foreign, "not owned by cluster c1"},
		{"listener given twice", dupListener, "given twice"},
		{"unsupported protocol", sctp, `protocol "SCTP"`},
		{"member IP", badMember, `member "198.18.0.300"`},
		{"member port", badPort, "port out of 1-65535"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMock(t, Config{Common: common("203.0.113.0/29")})
			_, err := providers.Validated(m).Ensure(context.Background(), tt.lb)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			if st := m.State(); len(st.LoadBalancers) != 0 || st.Counters.Writes != 0 {
				t.Errorf("a rejected Ensure changed the state: %+v", st)
			}
		})
	}
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	if err := m.Delete(context.Background(), "c2--shop-web", lbmodel.L4); err == nil {
		t.Error("Delete of another cluster's name succeeded")
	}
}

func TestMock_aModelWithoutListenersNeverReachesTheMock(t *testing.T) {
	ctx := context.Background()
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	p := providers.Validated(m)
	mustEnsure(t, m, model("web", member("198.18.0.11", 61000)))
	before := m.State()
	// What an SCTP-only Service builds: an existing one, and a new one.
	for _, svc := range []string{"web", "sctp-only"} {
		empty := model(svc)
		empty.Listeners = nil
		_, err := p.Ensure(ctx, empty)
		var invalid *lbmodel.InvalidModelError
		if !errors.As(err, &invalid) || !errors.Is(err, lbmodel.ErrNoListeners) {
			t.Errorf("Ensure(%s without listeners) = %v, want an InvalidModelError for ErrNoListeners", svc, err)
		}
	}
	if diff := cmp.Diff(before, m.State()); diff != "" {
		t.Errorf("the state changed, or the mock was called (-before +after):\n%s", diff)
	}
}

func TestMock_deleteOfAnAbsentLoadBalancerIsNoWrite(t *testing.T) {
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	mustEnsure(t, m, model("web"))
	for range 2 {
		if err := m.Delete(context.Background(), model("web").Name, lbmodel.L4); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	c := m.Counters()
	if c.Delete != 2 || c.Writes != 2 || c.PerLoadBalancer[model("web").Name].Writes != 2 {
		t.Errorf("counters = %+v, want 2 deletes and 2 writes (1 ensure, 1 delete)", c)
	}
	if st := m.State(); len(st.LoadBalancers) != 0 {
		t.Errorf("load balancers left: %+v", st.LoadBalancers)
	}
}

func TestMock_failedCallsChangeNothing(t *testing.T) {
	ctx := context.Background()
	m := newMock(t, Config{Common: common("203.0.113.0/29"), FailCalls: 1})
	if _, err := providers.Validated(m).Ensure(ctx, model("web", member("198.18.0.11", 61000))); !errors.Is(err, ErrInjected) {
		t.Fatalf("first call with failCalls 1: err = %v, want ErrInjected", err)
	}
	mustEnsure(t, m, model("web", member("198.18.0.11", 61000)))
	before := m.State().LoadBalancers

	m.FailNext(3)
	if _, err := providers.Validated(m).Ensure(ctx, model("web")); !errors.Is(err, ErrInjected) {
		t.Errorf("Ensure: err = %v, want ErrInjected", err)
	}
	if err := m.Delete(ctx, model("web").Name, lbmodel.L4); !errors.Is(err, ErrInjected) {
		t.Errorf("Delete: err = %v, want ErrInjected", err)
	}
	if _, err := m.List(ctx); !errors.Is(err, ErrInjected) {
		t.Errorf("List: err = %v, want ErrInjected", err)
	}
	lbDown := errors.New("controller unreachable")
	m.SetFault(lbDown, time.Now().Add(time.Hour))
	if _, err := providers.Validated(m).Ensure(ctx, model("web")); !errors.Is(err, lbDown) {
		t.Errorf("Ensure during SetFault: err = %v, want %v", err, lbDown)
	}
	if diff := cmp.Diff(before, m.State().LoadBalancers); diff != "" {
		t.Errorf("failed calls changed the load balancers (-before +after):\n%s", diff)
	}
	m.SetFault(lbDown, time.Now().Add(-time.Second))
	if _, err := m.List(ctx); err != nil {
		t.Errorf("List after the fault expired: %v", err)
	}
	m.FailNext(5)
	m.ClearFaults()
	if _, err := m.List(ctx); err != nil {
		t.Errorf("List after ClearFaults: %v", err)
	}
	c := m.Counters()
	want := Counters{Ensure: 4, Delete: 1, List: 3, Writes: 1, Failures: 5}
	got := c
	got.PerLoadBalancer = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
}

func TestMock_latencyHonoursTheContext(t *testing.T) {
	m := newMock(t, Config{Common: common("203.0.113.0/29"), Latency: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := providers.Validated(m).Ensure(ctx, model("web")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ensure with a cancelled context under latency: err = %v, want context.Canceled", err)
	}
	if st := m.State(); len(st.LoadBalancers) != 0 || st.Counters.Ensure != 1 {
		t.Errorf("state after a cancelled call: %+v", st)
	}
	m.SetLatency(time.Millisecond)
	mustEnsure(t, m, model("web"))
}

func TestMock_stateSurvivesAReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mock-state.json")
	cfg := Config{Common: common("203.0.113.0/29"), StateFile: path}
	m := newMock(t, cfg)
	web := model("web", member("198.18.0.11", 61000), member("198.18.0.12", 61000))
	mustEnsure(t, m, web)
	api := model("api")
	api.RequestedVIP = "198.51.100.1"
	mustEnsure(t, m, api)
	mustEnsure(t, m, model("gone"))
	if err := m.Delete(ctx, model("gone").Name, lbmodel.L4); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	before := m.State().LoadBalancers

	reopened := newMock(t, cfg)
	if diff := cmp.Diff(before, reopened.State().LoadBalancers); diff != "" {
		t.Errorf("state after reopen (-before +after):\n%s", diff)
	}
	// A restarted npl-lbsync ensuring the same model writes nothing.
	mustEnsure(t, reopened, web)
	if c := reopened.Counters(); c.Writes != 0 || c.Ensure != 1 {
		t.Errorf("counters after reopen and a no-op Ensure = %+v, want 1 ensure, 0 writes", c)
	}
	// The VIPs held are still taken: the next one is new.
	if got := mustEnsure(t, reopened, model("new")); got[0] != "203.0.113.2" {
		t.Errorf("VIP after reopen = %v, want 203.0.113.2 (.1 is web's)", got)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("files beside the state file (temporary files left?): %v", entries)
	}
}

func TestMock_failedSaveChangesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := newMock(t, Config{Common: common("203.0.113.0/29"), StateFile: filepath.Join(dir, "s.json")})
	mustEnsure(t, m, model("web", member("198.18.0.11", 61000)))
	before := m.State()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := providers.Validated(m).Ensure(context.Background(), model("web")); err == nil || !strings.Contains(err.Error(), "save state") {
		t.Fatalf("Ensure with an unwritable state file: err = %v, want save state error", err)
	}
	if _, err := providers.Validated(m).Ensure(context.Background(), model("api")); err == nil {
		t.Fatal("Ensure of a new load balancer with an unwritable state file succeeded")
	}
	if err := m.Delete(context.Background(), model("web").Name, lbmodel.L4); err == nil {
		t.Fatal("Delete with an unwritable state file succeeded")
	}
	after := m.State()
	if diff := cmp.Diff(before.LoadBalancers, after.LoadBalancers); diff != "" {
		t.Errorf("load balancers changed (-before +after):\n%s", diff)
	}
	if after.Counters.Writes != before.Counters.Writes {
		t.Errorf("writes %d -> %d, want unchanged", before.Counters.Writes, after.Counters.Writes)
	}
	// The VIP the failed Ensure of api would have taken is still free.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := mustEnsure(t, m, model("api")); got[0] != "203.0.113.2" {
		t.Errorf("VIP after the failed attempts = %v, want 203.0.113.2", got)
	}
}

func TestMock_openRejectsABadStateFile(t *testing.T) {
	tests := []struct {
		name    string
		content string
		wantErr string
	}{
		{"not JSON", "{", "unexpected end of JSON input"},
		{"unknown version", `{"version":9,"loadBalancers":[]}`, "version 9, want 1"},
		{"VIP held twice", `{"version":1,"loadBalancers":[` +
			`{"name":"c1--a-a","service":"a/a","vips":["203.0.113.1"],"listeners":[]},` +
			`{"name":"c1--b-b","service":"b/b","vips":["203.0.113.1"],"listeners":[]}]}`, "held by both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := New(Config{Common: common("203.0.113.0/29"), StateFile: path})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("New: err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestMock_listShowsOnlyThisCluster(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	shared := `{"version":1,"loadBalancers":[{"name":"c2--shop-web","service":"shop/web",` +
		`"vips":["203.0.113.1"],"listeners":[]}]}`
	if err := os.WriteFile(path, []byte(shared), 0o600); err != nil {
		t.Fatal(err)
	}
	m := newMock(t, Config{Common: common("203.0.113.0/29"), StateFile: path})
	vips := mustEnsure(t, m, model("web"))
	got, err := m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []lbmodel.LoadBalancer{withVIP(model("web"), "203.0.113.2")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if vips[0] != "203.0.113.2" {
		t.Errorf("VIP = %v: the other cluster's VIP must stay taken", vips)
	}
	if n := len(m.State().LoadBalancers); n != 2 {
		t.Errorf("State holds %d load balancers, want both clusters' 2", n)
	}
}

func TestMock_handlerServesState(t *testing.T) {
	m := newMock(t, Config{Common: common("203.0.113.0/29")})
	mustEnsure(t, m, model("web", member("198.18.0.12", 61000), member("198.18.0.11", 61000)))
	mustEnsure(t, m, model("api"))

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, StatePath, nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s", StatePath, rec.Code, rec.Header().Get("Content-Type"))
	}
	var got struct {
		LoadBalancers []lbmodel.LoadBalancer `json:"loadBalancers"`
		Counters      map[string]any         `json:"counters"`
	}
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode state: %v", err)
	}
	want := []lbmodel.LoadBalancer{
		withVIP(model("api"), "203.0.113.2"),
		withVIP(model("web", member("198.18.0.11", 61000), member("198.18.0.12", 61000)), "203.0.113.1"),
	}
	if diff := cmp.Diff(want, got.LoadBalancers); diff != "" {
		t.Errorf("loadBalancers (-want +got):\n%s", diff)
	}
	if got.Counters["ensure"] != float64(2) || got.Counters["writes"] != float64(2) {
		t.Errorf("counters = %v, want ensure 2, writes 2", got.Counters)
	}
}

func TestMock_handlerFaultEndpoint(t *testing.T) {
	post := func(h http.Handler, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, FaultPath, strings.NewReader(body)))
		return rec
	}

	t.Run("absent unless allowed", func(t *testing.T) {
		m := newMock(t, Config{Common: common("203.0.113.0/29")})
		if rec := post(m.Handler(), `{"failCalls":5}`); rec.Code != http.StatusNotFound {
			t.Errorf("POST %s without allowFaultInjection: %d, want 404", FaultPath, rec.Code)
		}
		if _, err := m.List(context.Background()); err != nil {
			t.Errorf("a refused fault request took effect: %v", err)
		}
	})

	t.Run("failCalls", func(t *testing.T) {
		m := newMock(t, Config{Common: common("203.0.113.0/29"), AllowFaultInjection: true})
		rec := post(m.Handler(), `{"failCalls":2}`)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"failCalls": 2`) {
			t.Fatalf("POST failCalls: %d %s", rec.Code, rec.Body)
		}
		for i := range 2 {
			if _, err := m.List(context.Background()); !errors.Is(err, ErrInjected) {
				t.Errorf("call %d: err = %v, want ErrInjected", i, err)
			}
		}
		if _, err := m.List(context.Background()); err != nil {
			t.Errorf("third call: %v", err)
		}
	})

	t.Run("failFor then clear", func(t *testing.T) {
		m := newMock(t, Config{Common: common("203.0.113.0/29"), AllowFaultInjection: true})
		if rec := post(m.Handler(), `{"failFor":"1h"}`); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "failUntil") {
			t.Fatalf("POST failFor: %d %s", rec.Code, rec.Body)
		}
		if _, err := m.List(context.Background()); !errors.Is(err, ErrInjected) {
			t.Errorf("during failFor: err = %v, want ErrInjected", err)
		}
		if rec := post(m.Handler(), `{"clear":true}`); rec.Code != http.StatusOK {
			t.Fatalf("POST clear: %d %s", rec.Code, rec.Body)
		}
		if _, err := m.List(context.Background()); err != nil {
			t.Errorf("after clear: %v", err)
		}
	})

	for _, body := range []string{
		`{}`,
		`{"failCalls":1,"clear":true}`,
		`{"failCalls":-1}`,
		`{"failFor":"soon"}`,
		`{"failFor":"-5s"}`,
		`{"failcalls":1,"extra":true}`,
		`not json`,
	} {
		t.Run("rejects "+body, func(t *testing.T) {
			m := newMock(t, Config{Common: common("203.0.113.0/29"), AllowFaultInjection: true})
			if rec := post(m.Handler(), body); rec.Code != http.StatusBadRequest {
				t.Errorf("POST %s: %d, want 400", body, rec.Code)
			}
			if _, err := m.List(context.Background()); err != nil {
				t.Errorf("a rejected fault request took effect: %v", err)
			}
		})
	}
}

func TestMock_implementsProvider(t *testing.T) {
	cfg, err := Parse(common("203.0.113.0/29"), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(interface{ Handler() http.Handler }); !ok {
		t.Errorf("the provider from Open (%T) does not serve a Handler", p)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without a cluster name succeeded")
	}
}

func TestMock_concurrentEnsuresGetDistinctVIPs(t *testing.T) {
	m := newMock(t, Config{Common: common("203.0.113.0/27")})
	const n = 20
	vips := make(chan string, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			st, err := providers.Validated(m).Ensure(context.Background(), model(fmt.Sprintf("svc-%d", i)))
			if err != nil {
				errs <- err
				return
			}
			vips <- st.VIPs[0]
		}()
	}
	seen := map[string]bool{}
	for range n {
		select {
		case err := <-errs:
			t.Fatalf("Ensure: %v", err)
		case v := <-vips:
			if seen[v] {
				t.Errorf("VIP %s given twice", v)
			}
			seen[v] = true
		}
	}
}

func TestMock_reloadsStateWrittenByAnotherReplica(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	a := newMock(t, Config{Common: common("203.0.113.0/29"), StateFile: path})
	b := newMock(t, Config{Common: common("203.0.113.0/29"), StateFile: path})
	vip := mustEnsure(t, a, model("web", member("198.18.0.11", 61000)))
	// b opened before a wrote: it must see a's load balancer and its VIP.
	lbs, err := b.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(lbs) != 1 || lbs[0].Name != model("web").Name {
		t.Fatalf("b.List = %+v, want web", lbs)
	}
	if got := mustEnsure(t, b, model("api")); got[0] == vip[0] {
		t.Errorf("b gave api the VIP %s that web holds", got[0])
	}
}

func TestMock_recordsEveryPolicyField(t *testing.T) {
	m, err := New(Config{Common: providers.Common{ClusterName: "c1", VIPPool: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")}}})
	if err != nil {
		t.Fatal(err)
	}
	p := &lbmodel.Policy{
		Persistence:             &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 10800},
		HealthCheck:             &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 2},
		Algorithm:               &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashSourceIP},
		SlowStartSeconds:        30,
		MaxConnectionsPerMember: 100,
	}
	lb := &lbmodel.LoadBalancer{Name: "c1--ns-web", Service: "ns/web", Listeners: []lbmodel.Listener{
		{Port: 80, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "c1--ns-web-TCP-80", Policy: p}}}}
	st, err := providers.Validated(m).Ensure(context.Background(), lb)
	if err != nil || len(st.Warnings) != 0 {
		t.Fatalf("Ensure: %v, warnings %v", err, st.Warnings)
	}
	lbs, err := m.List(context.Background())
	if err != nil || len(lbs) != 1 {
		t.Fatalf("List: %v %v", lbs, err)
	}
	if diff := cmp.Diff(p, lbs[0].Listeners[0].Pool.Policy); diff != "" {
		t.Errorf("recorded policy (-want +got):\n%s", diff)
	}
}
