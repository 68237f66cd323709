package bigip

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

const (
	testCluster   = "c1"
	testPartition = "npl-c1"
)

var testVIPPool = []netip.Prefix{netip.MustParsePrefix("198.18.100.0/29")}

// env is a simulator and a provider connected to it through go-bigip.
type env struct {
	sim  *bigipsim.Server
	dir  string
	prov providers.Provider
}

type envOptions struct {
	tls     bool
	section map[string]any // overrides of the provider section
	noOpen  bool
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	sim := bigipsim.New(bigipsim.Options{TLS: o.tls, Username: "admin", Password: "s3cret"})
	if err := sim.Start(); err != nil {
		t.Fatalf("start simulator: %v", err)
	}
	t.Cleanup(sim.Close)
	e := &env{sim: sim, dir: t.TempDir()}
	section := map[string]any{
		"url":          sim.URL(),
		"usernameFile": e.write(t, "username", "admin\n"),
		"passwordFile": e.write(t, "password", "s3cret\n"),
	}
	if o.tls {
		section["caFile"] = e.write(t, "ca.pem", string(sim.CACertPEM()))
	} else {
		section["insecure"] = true // the simulator over http
	}
	for k, v := range o.section {
		if v == nil {
			delete(section, k)
			continue
		}
		section[k] = v
	}
	if !o.noOpen {
		e.prov = e.open(t, section)
	}
	return e
}

func (e *env) write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) open(t *testing.T, section map[string]any) providers.Provider {
	t.Helper()
	cfg, err := parseSection(section)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	p, err := cfg.Open(context.Background())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	// As the registry opens it.
	return providers.Validated(p)
}

func parseSection(section map[string]any) (providers.Config, error) {
	raw, err := json.Marshal(section)
	if err != nil {
		return nil, err
	}
	return Parse(providers.Common{ClusterName: testCluster, VIPPool: testVIPPool}, raw)
}

// reopen builds a second provider on the same BIG-IP, as a restarted
// npl-lbsync would.
func (e *env) reopen(t *testing.T) providers.Provider {
	t.Helper()
	return e.open(t, map[string]any{
		"url": e.sim.URL(), "usernameFile": filepath.Join(e.dir, "username"), "passwordFile": filepath.Join(e.dir, "password"),
		"insecure": true,
	})
}

func (e *env) ensure(t *testing.T, lb *lbmodel.LoadBalancer) providers.Status {
	t.Helper()
	st, err := e.prov.Ensure(context.Background(), lb)
	if err != nil {
		t.Fatalf("Ensure(%s): %v", lb.Name, err)
	}
	return st
}

// do runs a setup call on the simulator and fails the test if it fails.
func (e *env) do(t *testing.T, method, path string, body any) {
	t.Helper()
	if status, out := e.sim.Do(method, path, body); status != 200 {
		t.Fatalf("%s %s: %d %s", method, path, status, out)
	}
}

func member(ip string, port int32) lbmodel.Member {
	return lbmodel.Member{IP: ip, Port: port, Enabled: true}
}

func drained(ip string, port int32) lbmodel.Member {
	return lbmodel.Member{IP: ip, Port: port, Enabled: false}
}

func listener(lb string, proto lbmodel.Protocol, port int32, members ...lbmodel.Member) lbmodel.Listener {
	if members == nil {
		members = []lbmodel.Member{}
	}
	return lbmodel.Listener{Port: port, Protocol: proto, Pool: lbmodel.Pool{Name: lbmodel.PoolName(lb, proto, port), Members: members}}
}

func newLB(service string, listeners ...func(lb string) lbmodel.Listener) *lbmodel.LoadBalancer {
	ns, name, _ := strings.Cut(service, "/")
	lb := &lbmodel.LoadBalancer{Name: lbmodel.LoadBalancerName(testCluster, ns, name), Service: service}
	for _, l := range listeners {
		lb.Listeners = append(lb.Listeners, l(lb.Name))
	}
	return lb
}

func tcp(port int32, members ...lbmodel.Member) func(string) lbmodel.Listener {
	return func(lb string) lbmodel.Listener { return listener(lb, lbmodel.TCP, port, members...) }
}

func udp(port int32, members ...lbmodel.Member) func(string) lbmodel.Listener {
	return func(lb string) lbmodel.Listener { return listener(lb, lbmodel.UDP, port, members...) }
}

func tagOf(lb *lbmodel.LoadBalancer) string {
	return ownerTag{Owner: "npl", Cluster: testCluster, Service: lb.Service, LB: lb.Name}.String()
}

func simMember(ip string, port int, session string) bigipsim.Member {
	return bigipsim.Member{FullPath: fmt.Sprintf("/%s/%s:%d", testPartition, ip, port), Address: ip, Session: session, State: "unchecked"}
}

func poolOf(t *testing.T, sim *bigipsim.Server, name string) bigipsim.Pool {
	t.Helper()
	for _, p := range sim.Dump().Pools {
		if p.FullPath == "/"+testPartition+"/"+name {
			return p
		}
	}
	t.Fatalf("pool %s not on the BIG-IP", name)
	return bigipsim.Pool{}
}

func TestProvider_createsPoolsAndVirtualsForTCPAndUDPListeners(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := newLB("shop/web",
		tcp(80, member("198.18.0.12", 61001), member("198.18.0.11", 61000)),
		udp(53, member("198.18.0.11", 61002)))

	st := e.ensure(t, lb)

	if diff := cmp.Diff(providers.Status{VIPs: []string{"198.18.100.1"}}, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	name := lb.Name
	got := e.sim.Dump()
	want := bigipsim.State{
		Partitions: []string{"Common", testPartition},
		Pools: []bigipsim.Pool{
			{FullPath: "/npl-c1/" + name + "-TCP-80", Description: tagOf(lb), Monitor: "/Common/tcp ", Members: []bigipsim.Member{
				simMember("198.18.0.11", 61000, "user-enabled"), simMember("198.18.0.12", 61001, "user-enabled"),
			}},
			{FullPath: "/npl-c1/" + name + "-UDP-53", Description: tagOf(lb), Monitor: "/Common/udp ", Members: []bigipsim.Member{
				simMember("198.18.0.11", 61002, "user-enabled"),
			}},
		},
		Virtuals: []bigipsim.Virtual{
			{FullPath: "/npl-c1/" + name + "-TCP-80", Description: tagOf(lb), Destination: "/npl-c1/198.18.100.1:80", IPProtocol: "tcp",
				Pool: "/npl-c1/" + name + "-TCP-80", SourceAddressTranslation: "automap", Profiles: []string{"/Common/tcp"}},
			{FullPath: "/npl-c1/" + name + "-UDP-53", Description: tagOf(lb), Destination: "/npl-c1/198.18.100.1:53", IPProtocol: "udp",
				Pool: "/npl-c1/" + name + "-UDP-53", SourceAddressTranslation: "automap", Profiles: []string{"/Common/udp"}},
		},
		Nodes: []bigipsim.Node{
			{FullPath: "/npl-c1/198.18.0.11", Address: "198.18.0.11"},
			{FullPath: "/npl-c1/198.18.0.12", Address: "198.18.0.12"},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("BIG-IP configuration (-want +got):\n%s", diff)
	}
	// A partition, then a pool and a virtual per listener; nothing read first.
	wantCalls := map[string]int{"POST login": 1, "PATCH token": 1, "GET partition": 1, "POST partition": 1, "GET virtual": 1, "GET pool": 1, "POST pool": 2, "POST virtual": 2}
	if diff := cmp.Diff(wantCalls, e.sim.Calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestProvider_membershipChangeIsOneWrite(t *testing.T) {
	e := newEnv(t, envOptions{})
	m1, m2, m3 := member("198.18.0.11", 61000), member("198.18.0.12", 61000), member("198.18.0.13", 61005)
	e.ensure(t, newLB("shop/web", tcp(80, m1), udp(53, m1)))

	steps := []struct {
		name        string
		lb          *lbmodel.LoadBalancer
		wantMembers []bigipsim.Member
	}{
		{"scale up by two", newLB("shop/web", tcp(80, m1, m2, m3), udp(53, m1)), []bigipsim.Member{
			simMember("198.18.0.11", 61000, "user-enabled"), simMember("198.18.0.12", 61000, "user-enabled"), simMember("198.18.0.13", 61005, "user-enabled"),
		}},
		{"drain one", newLB("shop/web", tcp(80, m1, drained("198.18.0.12", 61000), m3), udp(53, m1)), []bigipsim.Member{
			simMember("198.18.0.11", 61000, "user-enabled"), simMember("198.18.0.12", 61000, "user-disabled"), simMember("198.18.0.13", 61005, "user-enabled"),
		}},
		{"remove the drained one", newLB("shop/web", tcp(80, m1, m3), udp(53, m1)), []bigipsim.Member{
			simMember("198.18.0.11", 61000, "user-enabled"), simMember("198.18.0.13", 61005, "user-enabled"),
		}},
		{"scale down to none", newLB("shop/web", tcp(80), udp(53, m1)), []bigipsim.Member{}},
		{"scale up from none", newLB("shop/web", tcp(80, m2), udp(53, m1)), []bigipsim.Member{
			simMember("198.18.0.12", 61000, "user-enabled"),
		}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			e.sim.ResetCounters()
			e.ensure(t, s.lb)
			if got := e.sim.Writes(); got != 1 {
				t.Errorf("writes = %d, want 1 (calls %v)", got, e.sim.Calls())
			}
			if got := e.sim.Count("PUT", bigipsim.KindPool); got != 1 {
				t.Errorf("PUT pool calls = %d, want 1", got)
			}
			got := poolOf(t, e.sim, s.lb.Listeners[0].Pool.Name).Members
			if diff := cmp.Diff(s.wantMembers, got); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProvider_unchangedEnsureWritesNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := newLB("shop/web", tcp(80, member("198.18.0.11", 61000), drained("198.18.0.12", 61001)), udp(53, member("198.18.0.11", 61002)))
	first := e.ensure(t, lb)
	e.sim.ResetCounters()

	again := e.ensure(t, lb)
	if got := e.sim.Writes(); got != 0 {
		t.Errorf("writes = %d, want 0 (calls %v)", got, e.sim.Calls())
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("status changed (-first +again):\n%s", diff)
	}

	// The same holds for a provider that starts afresh on the same BIG-IP.
	e.prov = e.reopen(t)
	e.sim.ResetCounters()
	restarted := e.ensure(t, lb)
	if got := e.sim.Writes(); got != 0 {
		t.Errorf("writes after a restart = %d, want 0 (calls %v)", got, e.sim.Calls())
	}
	if diff := cmp.Diff(first, restarted); diff != "" {
		t.Errorf("status after a restart (-first +restarted):\n%s", diff)
	}
}

func TestProvider_addsAndRemovesPorts(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := member("198.18.0.11", 61000)
	e.ensure(t, newLB("shop/web", tcp(80, m)))

	e.sim.ResetCounters()
	e.ensure(t, newLB("shop/web", tcp(80, m), tcp(443, m)))
	if diff := cmp.Diff(map[string]int{"GET virtual": 1, "GET pool": 1, "POST pool": 1, "POST virtual": 1}, e.sim.Calls()); diff != "" {
		t.Errorf("calls to add a port (-want +got):\n%s", diff)
	}

	e.sim.ResetCounters()
	lb := newLB("shop/web", tcp(443, m))
	e.ensure(t, lb)
	// The simulator refuses to delete a pool a virtual uses, so success
	// also shows the virtual went first.
	if got, want := e.sim.Count("DELETE", bigipsim.KindVirtual), 1; got != want {
		t.Errorf("DELETE virtual = %d, want %d", got, want)
	}
	if got, want := e.sim.Count("DELETE", bigipsim.KindPool), 1; got != want {
		t.Errorf("DELETE pool = %d, want %d", got, want)
	}
	var names []string
	for _, v := range e.sim.Dump().Virtuals {
		names = append(names, v.FullPath)
	}
	for _, p := range e.sim.Dump().Pools {
		names = append(names, p.FullPath)
	}
	want := []string{"/npl-c1/" + lb.Name + "-TCP-443", "/npl-c1/" + lb.Name + "-TCP-443"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("objects left (-want +got):\n%s", diff)
	}
}

func TestProvider_deleteRemovesEverythingAndIsIdempotent(t *testing.T) {
	e := newEnv(t, envOptions{})
	web := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)), udp(53, member("198.18.0.11", 61001)))
	api := newLB("shop/api", tcp(8080, member("198.18.0.12", 61000)))
	e.ensure(t, web)
	e.ensure(t, api)

	ctx := context.Background()
	if err := e.prov.Delete(ctx, web.Name, web.Kind); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	got, err := e.prov.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(got) != 1 || got[0].Name != api.Name {
		t.Errorf("after Delete, List = %+v, want only %s", got, api.Name)
	}
	if n := len(e.sim.Dump().Pools); n != 1 {
		t.Errorf("pools left = %d, want 1", n)
	}

	e.sim.ResetCounters()
	for _, name := range []string{web.Name, "c1--never-existed"} {
		if err := e.prov.Delete(ctx, name, lbmodel.L4); err != nil {
			t.Errorf("Delete(%s) again: %v", name, err)
		}
	}
	if got := e.sim.Writes(); got != 0 {
		t.Errorf("writes to delete what is gone = %d, want 0", got)
	}

	// Objects removed behind the provider's back are deleted too (404 is success).
	e.do(t, "DELETE", "/mgmt/tm/ltm/virtual/~npl-c1~"+api.Listeners[0].Pool.Name, nil)
	if err := e.prov.Delete(ctx, api.Name, api.Kind); err != nil {
		t.Fatalf("Delete with a virtual already gone: %v", err)
	}
	if st := e.sim.Dump(); len(st.Pools)+len(st.Virtuals) != 0 {
		t.Errorf("objects left: %+v", st)
	}
}

func TestProvider_listReconstructsLoadBalancers(t *testing.T) {
	e := newEnv(t, envOptions{})
	web := newLB("shop/web",
		tcp(80, member("198.18.0.12", 61001), drained("198.18.0.11", 61000)),
		udp(53, member("198.18.0.11", 61002)))
	api := newLB("shop/api", tcp(8080))
	api.RequestedVIP = "198.18.101.7"
	e.ensure(t, web)
	e.ensure(t, api)

	got, err := e.reopen(t).List(context.Background())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	want := []lbmodel.LoadBalancer{
		{Name: api.Name, Service: "shop/api", VIPs: []string{"198.18.101.7"}, Listeners: []lbmodel.Listener{listener(api.Name, lbmodel.TCP, 8080)}},
		{Name: web.Name, Service: "shop/web", VIPs: []string{"198.18.100.1"}, Listeners: []lbmodel.Listener{
			listener(web.Name, lbmodel.TCP, 80, drained("198.18.0.11", 61000), member("198.18.0.12", 61001)),
			listener(web.Name, lbmodel.UDP, 53, member("198.18.0.11", 61002)),
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestProvider_choosesStableDistinctVIPs(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := member("198.18.0.11", 61000)
	// Another owner's virtual holds the first address of the range.
	e.do(t, "POST", "/mgmt/tm/auth/partition", map[string]any{"name": testPartition})
	e.do(t, "POST", "/mgmt/tm/ltm/virtual", map[string]any{"name": "theirs", "partition": testPartition, "destination": "/npl-c1/198.18.100.1:80"})

	a := e.ensure(t, newLB("shop/a", tcp(80, m)))
	b := e.ensure(t, newLB("shop/b", tcp(80, m)))
	requested := newLB("shop/c", tcp(80, m))
	requested.RequestedVIP = "198.18.100.5"
	c := e.ensure(t, requested)
	got := []string{a.VIPs[0], b.VIPs[0], c.VIPs[0]}
	if diff := cmp.Diff([]string{"198.18.100.2", "198.18.100.3", "198.18.100.5"}, got); diff != "" {
		t.Errorf("VIPs (-want +got):\n%s", diff)
	}

	// A restarted provider keeps each VIP and gives a new one a free address.
	e.prov = e.reopen(t)
	again := e.ensure(t, newLB("shop/b", tcp(80, m)))
	d := e.ensure(t, newLB("shop/d", tcp(80, m)))
	if again.VIPs[0] != "198.18.100.3" || d.VIPs[0] != "198.18.100.4" {
		t.Errorf("after restart: b %v, d %v; want 198.18.100.3 and 198.18.100.4", again.VIPs, d.VIPs)
	}

	// Dropping the requested VIP keeps the address the load balancer has.
	requested.RequestedVIP = ""
	if st := e.ensure(t, requested); st.VIPs[0] != "198.18.100.5" {
		t.Errorf("VIP after the request is dropped = %v, want 198.18.100.5", st.VIPs)
	}
	// Changing it moves the virtuals in one write each.
	requested.RequestedVIP = "198.18.101.1"
	e.sim.ResetCounters()
	e.ensure(t, requested)
	if got := e.sim.Count("PATCH", bigipsim.KindVirtual); got != 1 || e.sim.Writes() != 1 {
		t.Errorf("moving a VIP took %v calls, want one PATCH virtual", e.sim.Calls())
	}

	// The range /29 has six usable addresses: .1 (theirs) to .6; .5 was freed.
	e.ensure(t, newLB("shop/e", tcp(80, m)))
	e.ensure(t, newLB("shop/f", tcp(80, m)))
	_, err := e.prov.Ensure(context.Background(), newLB("shop/g", tcp(80, m)))
	if err == nil || !strings.Contains(err.Error(), "no free VIP") {
		t.Errorf("Ensure with the range used up: %v, want a no-free-VIP error", err)
	}
}

func TestProvider_concurrentEnsuresGetDistinctVIPs(t *testing.T) {
	e := newEnv(t, envOptions{})
	var wg sync.WaitGroup
	vips := make([]string, 6)
	errs := make([]error, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := e.prov.Ensure(context.Background(), newLB(fmt.Sprintf("ns/svc%d", i), tcp(80, member("198.18.0.11", int32(61000+i)))))
			errs[i] = err
			if err == nil {
				vips[i] = st.VIPs[0]
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, v := range vips {
		if errs[i] != nil {
			t.Fatalf("Ensure %d: %v", i, errs[i])
		}
		if seen[v] {
			t.Errorf("VIP %s given twice: %v", v, vips)
		}
		seen[v] = true
	}
}

func TestProvider_leavesObjectsOfOtherOwnersAlone(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)))
	e.ensure(t, lb)

	// Objects in our partition: one from another cluster, one with no tag,
	// one that takes the name of a pool we will need.
	otherTag := ownerTag{Owner: "npl", Cluster: "c2", Service: "shop/web", LB: "c2--shop-web"}.String()
	taken := lbmodel.PoolName(lb.Name, lbmodel.TCP, 443)
	e.do(t, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "c2--shop-web-TCP-80", "partition": testPartition, "description": otherTag, "members": []string{"198.18.0.99:80"}})
	e.do(t, "POST", "/mgmt/tm/ltm/virtual", map[string]any{"name": "c2--shop-web-TCP-80", "partition": testPartition, "description": otherTag,
		"destination": "/npl-c1/198.18.100.2:80", "pool": "/npl-c1/c2--shop-web-TCP-80"})
	e.do(t, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": "handmade", "partition": testPartition, "description": "made by hand"})
	e.do(t, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": taken, "partition": testPartition, "description": "not yours"})
	before := e.sim.Dump()

	ctx := context.Background()
	list, err := e.prov.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 1 || list[0].Name != lb.Name {
		t.Errorf("List = %+v, want only %s", list, lb.Name)
	}

	_, err = e.prov.Ensure(ctx, newLB("shop/web", tcp(80, member("198.18.0.11", 61000)), tcp(443)))
	if err == nil || !strings.Contains(err.Error(), "is not owned by") {
		t.Errorf("Ensure over another owner's pool: %v, want a not-owned error", err)
	}
	for _, l := range list {
		if err := e.prov.Delete(ctx, l.Name, l.Kind); err != nil {
			t.Fatalf("Delete(%s): %v", l.Name, err)
		}
	}

	// Only the objects this cluster owns went away.
	theirs := func(s bigipsim.State) bigipsim.State {
		out := bigipsim.State{}
		for _, p := range s.Pools {
			if _, ours := parseOwner(p.Description, testCluster); !ours {
				out.Pools = append(out.Pools, p)
			}
		}
		for _, v := range s.Virtuals {
			if _, ours := parseOwner(v.Description, testCluster); !ours {
				out.Virtuals = append(out.Virtuals, v)
			}
		}
		return out
	}
	after := e.sim.Dump()
	if diff := cmp.Diff(theirs(before), theirs(after)); diff != "" {
		t.Errorf("objects of other owners changed (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(theirs(after), bigipsim.State{Pools: after.Pools, Virtuals: after.Virtuals}); diff != "" {
		t.Errorf("objects of ours left after Delete (-want +got):\n%s", diff)
	}
}

func TestProvider_adoptsItsOwnObjectsFoundOnCreate(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)))
	e.ensure(t, newLB("shop/other", tcp(80)))

	// Another instance (say, before a leader change) made our pool with
	// stale members after this provider read the partition: the create meets
	// a 409, and the provider reads the pool and fixes its members.
	pool := lb.Listeners[0].Pool.Name
	e.do(t, "POST", "/mgmt/tm/ltm/pool", map[string]any{"name": pool, "partition": testPartition, "description": tagOf(lb),
		"monitor": "/Common/tcp", "members": []any{map[string]any{"name": "198.18.0.50:61000", "partition": testPartition}}})
	e.sim.ResetCounters()

	e.ensure(t, lb)
	if got := e.sim.Count("POST", bigipsim.KindPool); got != 1 {
		t.Errorf("POST pool = %d, want 1 (answered 409)", got)
	}
	if got := e.sim.Count("PUT", bigipsim.KindPool); got != 1 {
		t.Errorf("PUT pool = %d, want 1", got)
	}
	want := []bigipsim.Member{simMember("198.18.0.11", 61000, "user-enabled")}
	if diff := cmp.Diff(want, poolOf(t, e.sim, pool).Members); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}

	// A virtual deleted behind the provider's back is read as 404 and made again.
	e.do(t, "DELETE", "/mgmt/tm/ltm/virtual/~npl-c1~"+pool, nil)
	e.sim.ResetCounters()
	e.ensure(t, lb)
	if got := e.sim.Count("POST", bigipsim.KindVirtual); got != 1 {
		t.Errorf("POST virtual after it vanished = %d, want 1", got)
	}
}

func TestProvider_repairsDriftInOneWritePerObject(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)))
	e.ensure(t, lb)
	want := e.sim.Dump()

	// Someone edits our objects by hand.
	name := lb.Listeners[0].Pool.Name
	e.do(t, "PUT", "/mgmt/tm/ltm/pool/~npl-c1~"+name, map[string]any{"monitor": "/Common/http", "members": []string{}})
	e.do(t, "PATCH", "/mgmt/tm/ltm/virtual/~npl-c1~"+name, map[string]any{
		"sourceAddressTranslation": map[string]any{"type": "none"}, "profiles": []string{"/Common/tcp", "/Common/http"},
	})
	e.sim.ResetCounters()
	e.ensure(t, lb)

	if diff := cmp.Diff(map[string]int{"PUT pool": 1, "PATCH virtual": 1}, writesOnly(e.sim.Calls())); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, e.sim.Dump()); diff != "" {
		t.Errorf("configuration after repair (-want +got):\n%s", diff)
	}
}

func TestProvider_keepsOrAdoptsAVIPMovedByHand(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)), tcp(443, member("198.18.0.11", 61001)))
	e.ensure(t, lb)
	move := func(l lbmodel.Listener, vip string) {
		e.do(t, "PATCH", "/mgmt/tm/ltm/virtual/~npl-c1~"+l.Pool.Name, map[string]any{"destination": fmt.Sprintf("/npl-c1/%s:%d", vip, l.Port)})
	}
	destinations := func() []string {
		var out []string
		for _, v := range e.sim.Dump().Virtuals {
			out = append(out, v.Destination)
		}
		return out
	}

	for _, tc := range []struct {
		name    string
		restart bool
	}{{"same process", false}, {"after a restart", true}} {
		t.Run("one virtual moved is drift/"+tc.name, func(t *testing.T) {
			if tc.restart {
				e.prov = e.reopen(t)
			}
			move(lb.Listeners[0], "198.18.100.6")
			e.sim.ResetCounters()
			if st := e.ensure(t, lb); st.VIPs[0] != "198.18.100.1" {
				t.Errorf("VIP = %v, want 198.18.100.1", st.VIPs)
			}
			if got := writesOnly(e.sim.Calls()); !cmp.Equal(got, map[string]int{"PATCH virtual": 1}) {
				t.Errorf("writes %v, want one PATCH virtual", got)
			}
			if diff := cmp.Diff([]string{"/npl-c1/198.18.100.1:443", "/npl-c1/198.18.100.1:80"}, destinations()); diff != "" {
				t.Errorf("destinations (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("all virtuals moved is a new VIP", func(t *testing.T) {
		e.prov = e.reopen(t)
		move(lb.Listeners[0], "198.18.100.6")
		move(lb.Listeners[1], "198.18.100.6")
		e.sim.ResetCounters()
		if st := e.ensure(t, lb); st.VIPs[0] != "198.18.100.6" {
			t.Errorf("VIP = %v, want the address set by hand", st.VIPs)
		}
		if got := e.sim.Writes(); got != 0 {
			t.Errorf("writes = %d, want 0", got)
		}
	})
}

func writesOnly(calls map[string]int) map[string]int {
	out := map[string]int{}
	for k, n := range calls {
		if !strings.HasPrefix(k, "GET ") {
			out[k] = n
		}
	}
	return out
}

func TestProvider_errorsNeverDeleteAnything(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)), udp(53, member("198.18.0.11", 61001)))
	e.ensure(t, lb)
	before := e.sim.Dump()

	tests := []struct {
		name     string
		fault    bigipsim.Fault
		wantText string
	}{
		{"pool read fails", bigipsim.Fault{Method: "GET", Path: "ltm/pool/", Status: 500}, "read pool /npl-c1/" + lb.Name + "-TCP-80"},
		{"virtual read fails", bigipsim.Fault{Method: "GET", Path: "ltm/virtual/", Status: 502, Message: "bad gateway"}, "bad gateway"},
		{"member write fails", bigipsim.Fault{Method: "PUT", Path: "ltm/pool/", Status: 500}, "update pool /npl-c1/" + lb.Name + "-TCP-80"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := e.sim.InjectFault(tc.fault)
			if err != nil {
				t.Fatal(err)
			}
			defer e.sim.RemoveFault(id)
			// Scale to zero and drop the UDP listener: deletes if it went wrong.
			_, err = e.prov.Ensure(context.Background(), newLB("shop/web", tcp(80)))
			if err == nil || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("Ensure = %v, want an error containing %q", err, tc.wantText)
			}
			if diff := cmp.Diff(before, e.sim.Dump()); diff != "" {
				t.Errorf("configuration changed after an error (-before +after):\n%s", diff)
			}
		})
	}
}

func TestProvider_authentication(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tokenAuth  bool
		wantLogins int
	}{
		{"token", true, 1},
		{"basic", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{section: map[string]any{"tokenAuth": tc.tokenAuth}})
			e.ensure(t, newLB("shop/web", tcp(80, member("198.18.0.11", 61000))))
			if _, err := e.prov.List(context.Background()); err != nil {
				t.Fatalf("List: %v", err)
			}
			if got := e.sim.Count("POST", bigipsim.KindLogin); got != tc.wantLogins {
				t.Errorf("logins = %d, want %d", got, tc.wantLogins)
			}
		})
	}
}

func TestProvider_logsInAgainWhenTheTokenExpires(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.ensure(t, newLB("shop/web", tcp(80, member("198.18.0.11", 61000))))

	e.sim.ExpireTokens()
	e.ensure(t, newLB("shop/web", tcp(80, member("198.18.0.12", 61000))))

	if got := e.sim.Count("POST", bigipsim.KindLogin); got != 2 {
		t.Errorf("logins = %d, want 2", got)
	}
	want := []bigipsim.Member{simMember("198.18.0.12", 61000, "user-enabled")}
	if diff := cmp.Diff(want, poolOf(t, e.sim, lbmodel.PoolName(lbmodel.LoadBalancerName(testCluster, "shop", "web"), lbmodel.TCP, 80)).Members); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
}

func TestProvider_logsInAgainBeforeTheTokenExpires(t *testing.T) {
	e := newEnv(t, envOptions{})
	api := providers.Unwrap(e.prov).(*provider).api
	var mu sync.Mutex
	now := time.Now()
	api.mu.Lock()
	api.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	api.mu.Unlock()
	lb := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)))
	e.ensure(t, lb)
	if got := e.sim.Count("POST", bigipsim.KindLogin); got != 1 {
		t.Fatalf("logins = %d, want 1", got)
	}

	mu.Lock()
	now = now.Add(tokenLifetime - time.Minute) // still valid, but close to expiry
	mu.Unlock()
	e.ensure(t, lb)
	if got := e.sim.Count("POST", bigipsim.KindLogin); got != 2 {
		t.Errorf("logins = %d, want 2: a new one ahead of expiry", got)
	}
	if got := e.sim.Calls()["GET pool"] + e.sim.Calls()["GET virtual"]; got == 0 {
		t.Errorf("no calls after the new login: %v", e.sim.Calls())
	}
}

func TestProvider_badCredentialsFailOpen(t *testing.T) {
	e := newEnv(t, envOptions{noOpen: true})
	cfg, err := parseSection(map[string]any{
		"url": e.sim.URL(), "usernameFile": e.write(t, "u", "admin"), "passwordFile": e.write(t, "p", "wrong"), "insecure": true,
	})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	_, err = cfg.Open(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Authentication failed") {
		t.Fatalf("Open with a wrong password: %v, want an authentication error", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error shows the password: %v", err)
	}
}

func TestProvider_verifiesTLS(t *testing.T) {
	e := newEnv(t, envOptions{tls: true})
	e.ensure(t, newLB("shop/web", tcp(80, member("198.18.0.11", 61000))))

	stranger := bigipsim.New(bigipsim.Options{TLS: true})
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	for _, tc := range []struct {
		name      string
		tokenAuth bool
	}{{"token", true}, {"basic", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseSection(map[string]any{
				"url": e.sim.URL(), "usernameFile": filepath.Join(e.dir, "username"), "passwordFile": filepath.Join(e.dir, "password"),
				"caFile": e.write(t, "stranger.pem", string(stranger.CACertPEM())), "tokenAuth": tc.tokenAuth,
			})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			p, err := cfg.Open(context.Background())
			if err == nil {
				_, err = p.List(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("calls with a CA that did not sign the certificate: %v, want a certificate error", err)
			}
		})
	}

	insecure := e.open(t, map[string]any{
		"url": e.sim.URL(), "usernameFile": filepath.Join(e.dir, "username"), "passwordFile": filepath.Join(e.dir, "password"),
		"insecureSkipVerify": true,
	})
	if list, err := insecure.List(context.Background()); err != nil || len(list) != 1 {
		t.Errorf("List with insecureSkipVerify = %v, %v", list, err)
	}
}

func TestProvider_existingPartitionOnly(t *testing.T) {
	e := newEnv(t, envOptions{section: map[string]any{"createPartition": false}})
	ctx := context.Background()
	if list, err := e.prov.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("List without the partition = %v, %v; want nothing", list, err)
	}
	if err := e.prov.Delete(ctx, "c1--shop-web", lbmodel.L4); err != nil {
		t.Errorf("Delete without the partition: %v", err)
	}
	_, err := e.prov.Ensure(ctx, newLB("shop/web", tcp(80)))
	if err == nil || !strings.Contains(err.Error(), "createPartition is false") {
		t.Errorf("Ensure without the partition: %v", err)
	}
	if got := e.sim.Writes(); got != 0 {
		t.Errorf("writes = %d, want 0", got)
	}
	e.do(t, "POST", "/mgmt/tm/sys/folder", map[string]any{"name": testPartition, "partition": "/"})
	e.ensure(t, newLB("shop/web", tcp(80)))
}

func TestProvider_recreatesADeletedPartition(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)))
	e.ensure(t, lb)
	// Someone removes everything, partition included.
	name := lb.Listeners[0].Pool.Name
	e.do(t, "DELETE", "/mgmt/tm/ltm/virtual/~npl-c1~"+name, nil)
	e.do(t, "DELETE", "/mgmt/tm/ltm/pool/~npl-c1~"+name, nil)
	e.do(t, "DELETE", "/mgmt/tm/ltm/node/~npl-c1~198.18.0.11", nil)
	e.do(t, "DELETE", "/mgmt/tm/sys/folder/~npl-c1", nil)

	// The first call finds out; the next one makes it all again.
	if _, err := e.prov.Ensure(context.Background(), lb); err == nil || !strings.Contains(err.Error(), "folder (/npl-c1) was not found") {
		t.Fatalf("Ensure on a deleted partition: %v", err)
	}
	e.ensure(t, lb)
	st := e.sim.Dump()
	if len(st.Pools) != 1 || len(st.Virtuals) != 1 {
		t.Errorf("after the partition was made again: %+v", st)
	}
}

func TestProvider_rejectsBadModels(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name     string
		lb       *lbmodel.LoadBalancer
		wantText string
	}{
		{"bad member IP", newLB("shop/web", tcp(80, member("node-1", 61000))), `member "node-1": not an IP address`},
		{"bad member port", newLB("shop/web", tcp(80, member("198.18.0.1", 0))), "port out of 1-65535"},
		{"bad protocol", &lbmodel.LoadBalancer{Name: "c1--x", Listeners: []lbmodel.Listener{{Port: 80, Protocol: "SCTP", Pool: lbmodel.Pool{Name: "p"}}}}, "TCP or UDP"},
		{"bad pool name (the model's rule, which is BIG-IP's)", &lbmodel.LoadBalancer{Name: "c1--x", Listeners: []lbmodel.Listener{{Port: 80, Protocol: "TCP", Pool: lbmodel.Pool{Name: "a/b"}}}}, "holds a character other than letters, digits"},
		{"bad requested VIP", &lbmodel.LoadBalancer{Name: "c1--x", RequestedVIP: "vip"}, `requested VIP "vip"`},
		{"no name", &lbmodel.LoadBalancer{}, "no name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.prov.Ensure(context.Background(), tc.lb)
			if err == nil || !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("Ensure = %v, want an error containing %q", err, tc.wantText)
			}
		})
	}
	if got := e.sim.Writes(); got != 0 {
		t.Errorf("writes = %d, want 0", got)
	}
}

// An SCTP-only Service builds a model without listeners. BIG-IP's Ensure
// deletes the objects a model no longer has, so such a model reaching it
// would delete every object of the Service: it must not reach it.
func TestProvider_aModelWithoutListenersDeletesNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	web := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)), udp(53, member("198.18.0.11", 61001)))
	e.ensure(t, web)
	before := e.sim.Dump()
	if len(before.Virtuals) != 2 || len(before.Pools) != 2 {
		t.Fatalf("after the first Ensure: %+v", before)
	}
	e.sim.ResetCounters()
	for _, lb := range []*lbmodel.LoadBalancer{newLB("shop/web"), newLB("shop/sctp-only")} {
		_, err := e.prov.Ensure(context.Background(), lb)
		var invalid *lbmodel.InvalidModelError
		if !errors.As(err, &invalid) || !errors.Is(err, lbmodel.ErrNoListeners) {
			t.Errorf("Ensure(%s without listeners) = %v, want an InvalidModelError for ErrNoListeners", lb.Name, err)
		}
	}
	if got := e.sim.Writes(); got != 0 {
		t.Errorf("writes = %d, want 0", got)
	}
	if diff := cmp.Diff(before, e.sim.Dump()); diff != "" {
		t.Errorf("the BIG-IP's objects changed (-before +after):\n%s", diff)
	}
}

func TestProvider_ipv6Members(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := newLB("shop/web", tcp(80, member("2001:db8::11", 61000)))
	lb.RequestedVIP = "2001:db8:100::1"
	e.ensure(t, lb)
	st := e.sim.Dump()
	if got := st.Pools[0].Members[0].FullPath; got != "/npl-c1/2001:db8::11.61000" {
		t.Errorf("IPv6 member = %s, want BIG-IP's ip.port spelling", got)
	}
	if got := st.Virtuals[0].Destination; got != "/npl-c1/2001:db8:100::1.80" {
		t.Errorf("IPv6 destination = %s", got)
	}
	e.sim.ResetCounters()
	e.ensure(t, lb)
	if got := e.sim.Writes(); got != 0 {
		t.Errorf("writes on an unchanged IPv6 load balancer = %d", got)
	}
	list, err := e.prov.List(context.Background())
	if err != nil || len(list) != 1 || list[0].Listeners[0].Pool.Members[0] != member("2001:db8::11", 61000) {
		t.Errorf("List = %+v, %v", list, err)
	}
}
