package avi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmware/alb-sdk/go/models"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/test/harness/sim/avi/avisim"
)

const cluster = "c1"

// fixture is a simulator and a provider connected to it through the alb-sdk.
type fixture struct {
	t   testing.TB
	sim *avisim.Server
	p   *Provider
	// v is p as the registry opens it: behind providers.Validated.
	v            providers.Provider
	passwordFile string
	cfg          *Config
}

type fixtureOptions struct {
	sim     avisim.Options
	section map[string]any // overrides of the provider.avi section
	cluster string
}

func newFixture(t testing.TB, o fixtureOptions) *fixture {
	t.Helper()
	o.sim.Username, o.sim.Password = "admin", "first-password"
	sim := avisim.New(o.sim)
	if _, err := sim.Start(); err != nil {
		t.Fatalf("start the Avi simulator: %v", err)
	}
	t.Cleanup(func() { sim.Close() })

	dir := t.TempDir()
	caPath := writeFile(t, dir, "ca.crt", string(sim.CACertPEM()))
	section := map[string]any{
		"controller":   sim.Host(),
		"vipNetwork":   "vip-net",
		"usernameFile": writeFile(t, dir, "username", "admin\n"),
		"passwordFile": writeFile(t, dir, "password", "first-password\n"),
		"caFile":       caPath,
		"timeout":      "10s",
	}
	for k, v := range o.section {
		section[k] = v
	}
	raw, _ := json.Marshal(section)
	if o.cluster == "" {
		o.cluster = cluster
	}
	cfg, err := Parse(providers.Common{ClusterName: o.cluster}, raw)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	p, err := cfg.(*Config).open(context.Background())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	sim.ResetCounters()
	return &fixture{t: t, sim: sim, p: p, v: providers.Validated(p), passwordFile: section["passwordFile"].(string),
		cfg: cfg.(*Config)}
}

func (f *fixture) ensure(lb *lbmodel.LoadBalancer) providers.Status {
	f.t.Helper()
	st, err := f.v.Ensure(context.Background(), lb)
	if err != nil {
		f.t.Fatalf("Ensure %s: %v", lb.Name, err)
	}
	return st
}

func (f *fixture) list() []lbmodel.LoadBalancer {
	f.t.Helper()
	lbs, err := f.p.List(context.Background())
	if err != nil {
		f.t.Fatalf("List: %v", err)
	}
	return lbs
}

// objects returns the simulator's objects of typ in admin, decoded into the
// SDK's model T.
func objects[T any](f *fixture, typ string) []*T {
	f.t.Helper()
	var out []*T
	for _, o := range f.sim.Objects("admin", typ) {
		raw, _ := json.Marshal(o)
		var m T
		if err := json.Unmarshal(raw, &m); err != nil {
			f.t.Fatalf("decode %s: %v", typ, err)
		}
		out = append(out, &m)
	}
	return out
}

func (f *fixture) names(typ string) []string {
	var out []string
	for _, o := range f.sim.Objects("admin", typ) {
		out = append(out, o["name"].(string))
	}
	return out
}

// writesByRequest lists the write requests since the last reset, as
// "METHOD kind".
func (f *fixture) writes() []string {
	var out []string
	for _, r := range f.sim.Requests() {
		if r.Method == http.MethodGet || !strings.HasPrefix(r.Path, "/api/") {
			continue
		}
		kind := strings.Split(strings.TrimPrefix(r.Path, "/api/"), "/")[0]
		out = append(out, r.Method+" "+kind)
	}
	return out
}

func member(ip string, port int32) lbmodel.Member {
	return lbmodel.Member{IP: ip, Port: port, Enabled: true}
}

func listener(lbName string, proto lbmodel.Protocol, port int32, members ...lbmodel.Member) lbmodel.Listener {
	members = lbmodel.SortMembers(append([]lbmodel.Member{}, members...))
	return lbmodel.Listener{Port: port, Protocol: proto,
		Pool: lbmodel.Pool{Name: lbmodel.PoolName(lbName, proto, port), Members: members}}
}

// webLB is the load balancer of Service ns/<svc> with the given listeners.
func webLB(svc string, listeners ...func(name string) lbmodel.Listener) *lbmodel.LoadBalancer {
	name := lbmodel.LoadBalancerName(cluster, "ns", svc)
	lb := &lbmodel.LoadBalancer{Name: name, Service: "ns/" + svc}
	for _, l := range listeners {
		lb.Listeners = append(lb.Listeners, l(name))
	}
	lbmodel.SortListeners(lb.Listeners)
	return lb
}

func tcp(port int32, members ...lbmodel.Member) func(string) lbmodel.Listener {
	return func(name string) lbmodel.Listener { return listener(name, lbmodel.TCP, port, members...) }
}

func udp(port int32, members ...lbmodel.Member) func(string) lbmodel.Listener {
	return func(name string) lbmodel.Listener { return listener(name, lbmodel.UDP, port, members...) }
}

// withVIPs returns a copy of lb as List reports it.
func withVIPs(lb *lbmodel.LoadBalancer, vips ...string) lbmodel.LoadBalancer {
	out := *lb
	out.VIPs = vips
	out.RequestedVIP = ""
	return out
}

func TestProvider_createsTheAKOLayout(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := webLB("web",
		tcp(80, member("198.18.0.12", 61001), member("198.18.0.11", 61000)),
		udp(53, member("198.18.0.11", 61002)))

	st := f.ensure(lb)

	if diff := cmp.Diff([]string{"198.18.200.1"}, st.VIPs); diff != "" {
		t.Errorf("Status.VIPs (-want +got):\n%s", diff)
	}
	wantWrites := []string{"POST vsvip", "POST pool", "POST pool", "POST l4policyset", "POST virtualservice"}
	if diff := cmp.Diff(wantWrites, f.writes()); diff != "" {
		t.Errorf("writes, in order (-want +got):\n%s", diff)
	}

	name := "c1--ns_web"
	wantMarkers := []*models.RoleFilterMatchLabel{
		{Key: ptr("clustername"), Values: []string{"c1"}},
		{Key: ptr("service"), Values: []string{"ns/web"}},
	}
	vsvips := objects[models.VsVip](f, "vsvip")
	if len(vsvips) != 1 || *vsvips[0].Name != name {
		t.Fatalf("vsvips: %v", f.names("vsvip"))
	}
	vip := vsvips[0].Vip[0]
	if !*vip.AutoAllocateIP || refName(vip.IPAMNetworkSubnet.NetworkRef) != "vip-net" {
		t.Errorf("vsvip vip: auto %v network %v", *vip.AutoAllocateIP, deref(vip.IPAMNetworkSubnet.NetworkRef))
	}
	if diff := cmp.Diff(wantMarkers, vsvips[0].Markers); diff != "" {
		t.Errorf("vsvip markers (-want +got):\n%s", diff)
	}

	pools := objects[models.Pool](f, "pool")
	if diff := cmp.Diff([]string{name + "-TCP-80", name + "-UDP-53"}, f.names("pool")); diff != "" {
		t.Fatalf("pools (-want +got):\n%s", diff)
	}
	for i, want := range []struct {
		monitor string
		servers []string
	}{
		{"System-TCP", []string{"198.18.0.11:61000:V4:true", "198.18.0.12:61001:V4:true"}},
		{"System-UDP", []string{"198.18.0.11:61002:V4:true"}},
	} {
		pool := pools[i]
		var servers []string
		for _, s := range pool.Servers {
			servers = append(servers, fmt.Sprintf("%s:%d:%s:%t", *s.IP.Addr, *s.Port, *s.IP.Type, *s.Enabled))
		}
		if diff := cmp.Diff(want.servers, servers); diff != "" {
			t.Errorf("pool %s servers (-want +got):\n%s", *pool.Name, diff)
		}
		if len(pool.HealthMonitorRefs) != 1 || !strings.HasSuffix(pool.HealthMonitorRefs[0], "#"+want.monitor) {
			t.Errorf("pool %s health monitors: %v, want %s", *pool.Name, pool.HealthMonitorRefs, want.monitor)
		}
		if deref(pool.CreatedBy) != "npl-c1" || deref(pool.CloudConfigCksum) == "" ||
			pool.GracefulDisableTimeout == nil || *pool.GracefulDisableTimeout != 1 || refName(pool.CloudRef) != "Default-Cloud" {
			t.Errorf("pool %s: created_by %q cksum %q graceful %v cloud %q", *pool.Name, deref(pool.CreatedBy),
				deref(pool.CloudConfigCksum), pool.GracefulDisableTimeout, deref(pool.CloudRef))
		}
		if diff := cmp.Diff(wantMarkers, pool.Markers); diff != "" {
			t.Errorf("pool %s markers (-want +got):\n%s", *pool.Name, diff)
		}
	}

	policies := objects[models.L4PolicySet](f, "l4policyset")
	if len(policies) != 1 || deref(policies[0].CreatedBy) != "npl-c1" {
		t.Fatalf("l4policysets: %v", f.names("l4policyset"))
	}
	wantRules := []ruleSpec{
		{Port: 80, Protocol: lbmodel.TCP, Pool: name + "-TCP-80"},
		{Port: 53, Protocol: lbmodel.UDP, Pool: name + "-UDP-53"},
	}
	if diff := cmp.Diff(wantRules, rulesOf(policies[0])); diff != "" {
		t.Errorf("policy rules (-want +got):\n%s", diff)
	}

	vss := objects[models.VirtualService](f, "virtualservice")
	if len(vss) != 1 {
		t.Fatalf("virtualservices: %v", f.names("virtualservice"))
	}
	vs := vss[0]
	got := map[string]string{
		"name": deref(vs.Name), "created_by": deref(vs.CreatedBy), "cloud": refName(vs.CloudRef),
		"se_group": refName(vs.SeGroupRef), "vsvip": refName(vs.VsvipRef),
		"application_profile": refName(vs.ApplicationProfileRef), "network_profile": refName(vs.NetworkProfileRef),
		"l4_policy": refName(vs.L4Policies[0].L4PolicySetRef), "has_cksum": fmt.Sprint(deref(vs.CloudConfigCksum) != ""),
		"pool_ref": deref(vs.PoolRef),
	}
	want := map[string]string{
		"name": name, "created_by": "npl-c1", "cloud": "Default-Cloud", "se_group": "Default-Group", "vsvip": name,
		"application_profile": "System-L4-Application", "network_profile": "System-TCP-Proxy", "l4_policy": name,
		"has_cksum": "true", "pool_ref": "",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("virtual service (-want +got):\n%s", diff)
	}
	var services []string
	for _, s := range vs.Services {
		services = append(services, fmt.Sprintf("%d%s", *s.Port, refName(s.OverrideNetworkProfileRef)))
	}
	if diff := cmp.Diff([]string{"53System-UDP-Fast-Path", "80"}, services); diff != "" {
		t.Errorf("virtual service services (-want +got):\n%s", diff)
	}

	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(lb, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestProvider_requestedVIPIsKept(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := webLB("web", tcp(80, member("198.18.0.11", 61000)))
	lb.RequestedVIP = "198.18.200.77"
	if st := f.ensure(lb); len(st.VIPs) != 1 || st.VIPs[0] != "198.18.200.77" {
		t.Errorf("VIPs: got %v, want [198.18.200.77]", st.VIPs)
	}
	f.sim.ResetCounters()
	f.ensure(lb)
	if n := f.sim.Writes(); n != 0 {
		t.Errorf("second Ensure with a requested VIP: %d writes, want 0", n)
	}

	lb.RequestedVIP = "198.18.200.78"
	f.sim.ResetCounters()
	if st := f.ensure(lb); len(st.VIPs) != 1 || st.VIPs[0] != "198.18.200.78" {
		t.Errorf("VIPs after changing the requested VIP: got %v", st.VIPs)
	}
	// A controller refuses a new address for an existing vip ("If a new
	// preferred IP is needed, please recreate the VIP"): the VsVip is made
	// again, after the virtual service that uses it.
	if diff := cmp.Diff([]string{"DELETE virtualservice", "DELETE vsvip", "POST vsvip", "POST virtualservice"}, f.writes()); diff != "" {
		t.Errorf("changing the requested VIP, writes (-want +got):\n%s", diff)
	}
	f.sim.ResetCounters()
	f.ensure(lb)
	if n := f.sim.Writes(); n != 0 {
		t.Errorf("Ensure after the VIP moved: %d writes, want 0", n)
	}
}

func TestProvider_keepsSecretsFromTheSDK(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ensure(webLB("web", tcp(80, member("198.18.0.11", 61000))))
	f.sim.ExpireSessions()
	f.ensure(webLB("web", tcp(80, member("198.18.0.12", 61000))))

	// The SDK logs its cookies and dumps failed requests: it must hold no
	// password, session id or CSRF token.
	s := <-f.p.idle
	defer f.p.release(s)
	sess := reflect.ValueOf(s.client.AviSession).Elem()
	for _, field := range []string{"password", "sessionid", "csrfToken", "authToken"} {
		if v := sess.FieldByName(field).String(); v != "" {
			t.Errorf("the SDK session holds a %s", field)
		}
	}
}

func TestProvider_unchangedEnsureMakesNoWrite(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := webLB("web", tcp(80, member("198.18.0.11", 61000)), tcp(443, member("198.18.0.11", 61001)), udp(53))
	first := f.ensure(lb)
	f.sim.ResetCounters()

	again := f.ensure(lb)

	if n := f.sim.Writes(); n != 0 {
		t.Errorf("second Ensure: %d writes %v, want none", n, f.writes())
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("status changed (-first +second):\n%s", diff)
	}
}

func TestProvider_membershipChangeIsOneWrite(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	a, b, c := member("198.18.0.11", 61000), member("198.18.0.12", 61000), member("198.18.0.13", 61005)
	f.ensure(webLB("web", tcp(80, a), udp(53, a)))

	drainingB := b
	drainingB.Enabled = false
	steps := []struct {
		name    string
		members []lbmodel.Member
	}{
		{"scale up", []lbmodel.Member{a, b}},
		{"scale up by two", []lbmodel.Member{a, b, c}},
		{"drain one", []lbmodel.Member{a, drainingB, c}},
		{"scale down", []lbmodel.Member{a, c}},
		{"replace all", []lbmodel.Member{b}},
		{"no backend", nil},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			lb := webLB("web", tcp(80, st.members...), udp(53, a))
			f.sim.ResetCounters()
			f.ensure(lb)
			if diff := cmp.Diff([]string{"PUT pool"}, f.writes()); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(lb, "198.18.200.1")}, f.list()); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProvider_addAndRemoveListener(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	m := member("198.18.0.11", 61000)
	f.ensure(webLB("web", tcp(80, m), udp(53, m)))

	added := webLB("web", tcp(80, m), udp(53, m), tcp(443, m))
	f.sim.ResetCounters()
	f.ensure(added)
	if diff := cmp.Diff([]string{"POST pool", "PUT l4policyset", "PUT virtualservice"}, f.writes()); diff != "" {
		t.Errorf("adding a port, writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(added, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("after adding a port, List (-want +got):\n%s", diff)
	}

	removed := webLB("web", tcp(80, m), tcp(443, m))
	f.sim.ResetCounters()
	f.ensure(removed)
	if diff := cmp.Diff([]string{"PUT l4policyset", "PUT virtualservice", "DELETE pool"}, f.writes()); diff != "" {
		t.Errorf("removing a port, writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"c1--ns_web-TCP-443", "c1--ns_web-TCP-80"}, f.names("pool")); diff != "" {
		t.Errorf("pools after removing UDP 53 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(removed, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("after removing a port, List (-want +got):\n%s", diff)
	}
}

func TestProvider_changeListenerProtocol(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	m := member("198.18.0.11", 61000)
	f.ensure(webLB("web", tcp(80, m), tcp(53, m)))

	changed := webLB("web", tcp(80, m), udp(53, m))
	f.ensure(changed)

	if diff := cmp.Diff([]string{"c1--ns_web-TCP-80", "c1--ns_web-UDP-53"}, f.names("pool")); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
	vs := objects[models.VirtualService](f, "virtualservice")[0]
	if diff := cmp.Diff([]serviceSpec{{Port: 53, NetworkProfile: "System-UDP-Fast-Path"}, {Port: 80}}, vsSpecOf(vs).Services); diff != "" {
		t.Errorf("services (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(changed, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	// All UDP: the virtual service takes the UDP profile, as AKO does.
	allUDP := webLB("web", udp(53, m))
	f.ensure(allUDP)
	vs = objects[models.VirtualService](f, "virtualservice")[0]
	if got := vsSpecOf(vs); got.NetworkProfile != "System-UDP-Fast-Path" || len(got.Services) != 1 || got.Services[0].NetworkProfile != "" {
		t.Errorf("UDP-only virtual service: profile %s services %v", got.NetworkProfile, got.Services)
	}
}

func TestProvider_deleteRemovesEverything(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	m := member("198.18.0.11", 61000)
	// Its pool's name contains "c1--ns_web-": Deleting web must leave it.
	keep := webLB("web-2", tcp(80, m))
	f.ensure(keep)
	f.ensure(webLB("web", tcp(80, m), udp(53, m)))
	f.sim.ResetCounters()

	if err := f.p.Delete(context.Background(), "c1--ns_web", lbmodel.L4); err != nil {
		t.Fatalf("Delete: %v", err)
	}

	want := []string{"DELETE virtualservice", "DELETE l4policyset", "DELETE pool", "DELETE pool", "DELETE vsvip"}
	if diff := cmp.Diff(want, f.writes()); diff != "" {
		t.Errorf("deletes, in order (-want +got):\n%s", diff)
	}
	for _, typ := range []string{"virtualservice", "l4policyset", "vsvip"} {
		if diff := cmp.Diff([]string{"c1--ns_web-2"}, f.names(typ)); diff != "" {
			t.Errorf("%s left (-want +got):\n%s", typ, diff)
		}
	}
	if diff := cmp.Diff([]string{"c1--ns_web-2-TCP-80"}, f.names("pool")); diff != "" {
		t.Errorf("pools left (-want +got):\n%s", diff)
	}

	f.sim.ResetCounters()
	for _, name := range []string{"c1--ns_web", "c1--ns_never-existed"} {
		if err := f.p.Delete(context.Background(), name, lbmodel.L4); err != nil {
			t.Errorf("Delete %s again: %v", name, err)
		}
	}
	if n := f.sim.Writes(); n != 0 {
		t.Errorf("deleting what is gone made %d writes", n)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(keep, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestProvider_conflictOnCreateAdoptsUnownedObject(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	// A pool with the name the provider wants, made by hand: the read (by
	// created_by) misses it, the POST gets 409.
	if _, err := f.sim.Create("admin", "pool", map[string]any{"name": "c1--ns_web-TCP-80",
		"servers": []any{map[string]any{"ip": map[string]any{"addr": "198.18.9.9", "type": "V4"}, "port": 1}}}); err != nil {
		t.Fatal(err)
	}
	lb := webLB("web", tcp(80, member("198.18.0.11", 61000)))

	f.ensure(lb)

	var statuses []string
	for _, r := range f.sim.Requests() {
		if strings.HasPrefix(r.Path, "/api/pool") {
			statuses = append(statuses, fmt.Sprintf("%s %d", r.Method, r.Status))
		}
	}
	if diff := cmp.Diff([]string{"GET 200", "POST 409", "GET 200", "PUT 200"}, statuses); diff != "" {
		t.Errorf("pool requests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(lb, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestProvider_neverTouchesAnotherOwnersObject(t *testing.T) {
	tests := []struct {
		typ     string
		obj     map[string]any
		wantErr string
	}{
		{"pool", map[string]any{"name": "c1--ns_web-TCP-80", "created_by": "ako-c1"}, `pool exists and belongs to "ako-c1"`},
		{"vsvip", map[string]any{"name": "c1--ns_web", "vip": []any{map[string]any{"vip_id": "0", "auto_allocate_ip": true}},
			"markers": []any{map[string]any{"key": "clustername", "values": []any{"other"}}}}, `vsvip exists and belongs to "other"`},
	}
	for _, tc := range tests {
		t.Run(tc.typ, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{})
			if _, err := f.sim.Create("admin", tc.typ, tc.obj); err != nil {
				t.Fatal(err)
			}
			before := f.sim.Objects("admin", tc.typ)

			_, err := f.v.Ensure(context.Background(), webLB("web", tcp(80, member("198.18.0.11", 61000))))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Ensure: got %v, want an error containing %q", err, tc.wantErr)
			}
			if err := f.p.Delete(context.Background(), "c1--ns_web", lbmodel.L4); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if diff := cmp.Diff(before, f.sim.Objects("admin", tc.typ)); diff != "" {
				t.Errorf("the other owner's %s changed (-before +after):\n%s", tc.typ, diff)
			}
		})
	}
}

func TestProvider_logsInAgainWhenSessionsExpire(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	a, b := member("198.18.0.11", 61000), member("198.18.0.12", 61000)
	f.ensure(webLB("web", tcp(80, a)))

	t.Run("expired session", func(t *testing.T) {
		f.sim.ExpireSessions()
		f.sim.ResetCounters()
		lb := webLB("web", tcp(80, a, b))
		f.ensure(lb)
		if n := f.sim.Calls()["POST login"]; n != 1 {
			t.Errorf("logins: got %d, want 1", n)
		}
		if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(lb, "198.18.200.1")}, f.list()); diff != "" {
			t.Errorf("List (-want +got):\n%s", diff)
		}
	})

	t.Run("rotated password", func(t *testing.T) {
		f.sim.SetCredentials("admin", "second-password")
		writeFile(t, filepath.Dir(f.passwordFile), "password", "second-password\n")
		f.sim.ExpireSessions()
		lb := webLB("web", tcp(80, b))
		f.ensure(lb)
		if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(lb, "198.18.200.1")}, f.list()); diff != "" {
			t.Errorf("List (-want +got):\n%s", diff)
		}
	})

	t.Run("password file gone", func(t *testing.T) {
		if err := os.Remove(f.passwordFile); err != nil {
			t.Fatal(err)
		}
		f.sim.ExpireSessions()
		_, err := f.v.Ensure(context.Background(), webLB("web", tcp(80, a)))
		if err == nil || !strings.Contains(err.Error(), "POST /login: read password: open "+f.passwordFile) {
			t.Errorf("Ensure without a password file: got %v", err)
		}
		writeFile(t, filepath.Dir(f.passwordFile), "password", "second-password\n")
	})

	t.Run("wrong password", func(t *testing.T) {
		f.sim.SetCredentials("admin", "third-password")
		f.sim.ExpireSessions()
		_, err := f.v.Ensure(context.Background(), webLB("web", tcp(80, a)))
		if err == nil || !strings.Contains(err.Error(), "Avi 401: Invalid credentials") {
			t.Errorf("Ensure with a stale password: got %v, want Avi 401", err)
		}
		if err != nil && strings.Contains(err.Error(), "second-password") {
			t.Errorf("the error shows the password: %v", err)
		}
	})
}

func TestProvider_staleUpdateIsRetriedOnce(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	a, b := member("198.18.0.11", 61000), member("198.18.0.12", 61000)
	f.ensure(webLB("web", tcp(80, a)))
	f.sim.AddFault(avisim.Fault{Method: "PUT", Path: "/api/pool/*", Status: http.StatusPreconditionFailed, Count: 1})
	f.sim.ResetCounters()

	lb := webLB("web", tcp(80, a, b))
	f.ensure(lb)

	if diff := cmp.Diff([]string{"PUT pool", "PUT pool"}, f.writes()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(lb, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestProvider_serverErrorsDeleteNothing(t *testing.T) {
	a, b := member("198.18.0.11", 61000), member("198.18.0.12", 61000)
	before := webLB("web", tcp(80, a, b), udp(53, a))
	// One member less and UDP 53 removed: a wrong reaction to the error
	// would delete a member or the UDP pool.
	after := webLB("web", tcp(80, a))
	tests := []struct {
		name    string
		fault   avisim.Fault
		wantErr string
		// wantList is the state the error leaves: the writes made before it.
		wantList *lbmodel.LoadBalancer
	}{
		{
			name:     "pool update fails",
			fault:    avisim.Fault{Method: "PUT", Path: "/api/pool/*", Status: 503, Message: "controller busy"},
			wantErr:  "ensure pool c1--ns_web-TCP-80: Avi 503: controller busy",
			wantList: before,
		},
		{
			name:     "pool read fails",
			fault:    avisim.Fault{Method: "GET", Path: "/api/pool", Status: 500},
			wantErr:  "read pools of c1--ns_web: list pool: Avi 500: Internal Server Error",
			wantList: before,
		},
		{
			name:     "policy update fails",
			fault:    avisim.Fault{Method: "PUT", Path: "/api/l4policyset/*", Status: 502},
			wantErr:  "ensure l4policyset c1--ns_web: Avi 502: Bad Gateway",
			wantList: webLB("web", tcp(80, a), udp(53, a)),
		},
		{
			name:     "stale pool delete fails",
			fault:    avisim.Fault{Method: "DELETE", Path: "/api/pool/*", Status: 500},
			wantErr:  "delete pool c1--ns_web-UDP-53: Avi 500",
			wantList: after,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{})
			f.ensure(before)
			id := f.sim.AddFault(tc.fault)
			f.sim.ResetCounters()

			_, err := f.v.Ensure(context.Background(), after)

			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Ensure: got %v, want an error containing %q", err, tc.wantErr)
			}
			for _, r := range f.sim.Requests() {
				if r.Method == "DELETE" && r.Status < 300 {
					t.Errorf("a failed Ensure deleted %s", r.Path)
				}
			}
			f.sim.RemoveFault(id)
			if tc.name == "stale pool delete fails" {
				// The pool is no longer selected, so List shows it as a
				// listener of its own until the next Ensure removes it.
				if diff := cmp.Diff([]string{"c1--ns_web-TCP-80", "c1--ns_web-UDP-53"}, f.names("pool")); diff != "" {
					t.Errorf("pools (-want +got):\n%s", diff)
				}
			} else if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(tc.wantList, "198.18.200.1")}, f.list()); diff != "" {
				t.Errorf("state after the failed Ensure (-want +got):\n%s", diff)
			}

			f.ensure(after)
			if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(after, "198.18.200.1")}, f.list()); diff != "" {
				t.Errorf("after the next Ensure (-want +got):\n%s", diff)
			}
		})
	}
}

// During an upgrade a controller refuses every change with 403
// "Configuration is disallowed during upgrade" (AKO's
// lib.AviControllerUpgradeError): Ensure fails with that message, changes
// nothing, and converges once the upgrade is over.
func TestProvider_upgradeRefusesChangesUntilItEnds(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	a, b := member("198.18.0.11", 61000), member("198.18.0.12", 61000)
	before := webLB("web", tcp(80, a, b))
	f.ensure(before)
	f.sim.SetUpgrading(true)
	f.sim.ResetCounters()
	after := webLB("web", tcp(80, a))
	if _, err := f.v.Ensure(context.Background(), after); err == nil ||
		!strings.Contains(err.Error(), "Avi 403: Configuration is disallowed during upgrade") {
		t.Fatalf("Ensure during an upgrade: %v", err)
	}
	if err := f.v.Delete(context.Background(), before.Name, lbmodel.L4); err == nil {
		t.Error("Delete during an upgrade succeeded")
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(before, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("state after the refused changes (-want +got):\n%s", diff)
	}
	f.sim.SetUpgrading(false)
	f.ensure(after)
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(after, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("after the upgrade (-want +got):\n%s", diff)
	}
}

func TestProvider_timeoutsAreErrors(t *testing.T) {
	f := newFixture(t, fixtureOptions{section: map[string]any{"timeout": "200ms"}})
	lb := webLB("web", tcp(80, member("198.18.0.11", 61000)))
	id := f.sim.AddFault(avisim.Fault{Method: "GET", Path: "/api/virtualservice", Latency: time.Hour})

	_, err := f.v.Ensure(context.Background(), lb)

	if err == nil || !strings.Contains(err.Error(), "read virtualservice") {
		t.Fatalf("Ensure past the timeout: got %v, want a read error", err)
	}
	if n := f.sim.Writes(); n != 0 {
		t.Errorf("a timed-out Ensure made %d writes", n)
	}
	f.sim.RemoveFault(id)
	f.ensure(lb)
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(lb, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("after the next Ensure (-want +got):\n%s", diff)
	}
}

func TestProvider_cancelledContextEndsRequests(t *testing.T) {
	f := newFixture(t, fixtureOptions{section: map[string]any{"timeout": "1m"}})
	f.sim.AddFault(avisim.Fault{Method: "GET", Path: "/api/virtualservice", Latency: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)

	_, err := f.v.Ensure(ctx, webLB("web", tcp(80, member("198.18.0.11", 61000))))

	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Ensure with a cancelled context: got %v, want context.Canceled", err)
	}
}

func TestProvider_reportsTheControllersMessage(t *testing.T) {
	t.Run("unknown cloud", func(t *testing.T) {
		f := newFixture(t, fixtureOptions{section: map[string]any{"cloud": "No-Such-Cloud"}})
		_, err := f.v.Ensure(context.Background(), webLB("web", tcp(80, member("198.18.0.11", 61000))))
		if want := "ensure vsvip c1--ns_web: Avi 400: Cloud object not found!"; err == nil || err.Error() != want {
			t.Errorf("got %v, want %q", err, want)
		}
	})
	t.Run("no free VIP", func(t *testing.T) {
		f := newFixture(t, fixtureOptions{sim: avisim.Options{VIPSubnet: netip.MustParsePrefix("198.18.200.0/30")}})
		f.ensure(webLB("a", tcp(80)))
		f.ensure(webLB("b", tcp(80)))
		_, err := f.v.Ensure(context.Background(), webLB("c", tcp(80)))
		if want := "ensure vsvip c1--ns_c: Avi 400: No available free IPs"; err == nil || err.Error() != want {
			t.Errorf("got %v, want %q", err, want)
		}
	})
	t.Run("invalid model", func(t *testing.T) {
		f := newFixture(t, fixtureOptions{})
		_, err := f.v.Ensure(context.Background(), webLB("web", tcp(80, member("not-an-ip", 1))))
		var invalid *lbmodel.InvalidModelError
		if !errors.As(err, &invalid) || !strings.Contains(err.Error(), `member "not-an-ip": not an IP address`) {
			t.Errorf("got %v", err)
		}
		if n := len(f.sim.Requests()); n != 0 {
			t.Errorf("an invalid model made %d requests", n)
		}
	})
}

// An SCTP-only Service builds a model without listeners: it must neither
// reach the controller (no retry loop on its error) nor touch the load
// balancer the Service has.
func TestProvider_aModelWithoutListenersNeverReachesTheController(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	web := webLB("web", tcp(80, member("198.18.0.11", 61000)))
	f.ensure(web)
	before := f.sim.Dump()
	f.sim.ResetCounters()
	for _, lb := range []*lbmodel.LoadBalancer{webLB("web"), webLB("sctp-only")} {
		_, err := f.v.Ensure(context.Background(), lb)
		if !errors.Is(err, lbmodel.ErrNoListeners) {
			t.Errorf("Ensure(%s without listeners) = %v, want ErrNoListeners", lb.Name, err)
		}
	}
	if reqs := f.sim.Requests(); len(reqs) != 0 {
		t.Errorf("the controller got %d requests, want none: %+v", len(reqs), reqs)
	}
	if diff := cmp.Diff(before, f.sim.Dump()); diff != "" {
		t.Errorf("the controller's objects changed (-before +after):\n%s", diff)
	}
}

func TestProvider_listGroupsOnlyThisClustersObjects(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	m := member("198.18.0.11", 61000)
	web := webLB("web", tcp(80, m), udp(53, m))
	api := webLB("api", tcp(8080, member("198.18.0.12", 61000)))
	api.RequestedVIP = "198.18.200.50"
	f.ensure(web)
	f.ensure(api)

	// Another controller's objects, and another cluster's.
	for _, o := range []struct {
		typ string
		obj map[string]any
	}{
		{"pool", map[string]any{"name": "c2--ns-web-TCP-80", "created_by": "npl-c2"}},
		{"pool", map[string]any{"name": "c1--ns-ako-TCP-80", "created_by": "ako-c1"}},
		{"vsvip", map[string]any{"name": "c1--ns-ako", "vip": []any{map[string]any{"vip_id": "0", "auto_allocate_ip": true}},
			"markers": []any{map[string]any{"key": "clustername", "values": []any{"other"}}}}},
		{"virtualservice", map[string]any{"name": "c1--ns-ako", "created_by": "ako-c1", "vsvip_ref": "/api/vsvip?name=c1--ns-ako",
			"services": []any{map[string]any{"port": 80}}}},
	} {
		if _, err := f.sim.Create("admin", o.typ, o.obj); err != nil {
			t.Fatalf("create %s: %v", o.typ, err)
		}
	}
	// One of ours left behind by a failed delete.
	if _, err := f.sim.Create("admin", "pool", map[string]any{"name": "c1--ns_gone-TCP-80", "created_by": "npl-c1",
		"markers": []any{map[string]any{"key": "clustername", "values": []any{"c1"}}, map[string]any{"key": "service", "values": []any{"ns/gone"}}}}); err != nil {
		t.Fatal(err)
	}

	gone := webLB("gone", tcp(80))
	want := []lbmodel.LoadBalancer{withVIPs(api, "198.18.200.50"), withVIPs(gone), withVIPs(web, "198.18.200.1")}
	if diff := cmp.Diff(want, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	if err := f.p.Delete(context.Background(), gone.Name, gone.Kind); err != nil {
		t.Fatalf("Delete the leftover: %v", err)
	}
	if got := len(f.list()); got != 2 {
		t.Errorf("after deleting the leftover, List has %d load balancers, want 2", got)
	}
}

func TestProvider_listFollowsPages(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	const n = 51 // 102 pools: two pages of 100
	var want []lbmodel.LoadBalancer
	for i := 0; i < n; i++ {
		lb := webLB(fmt.Sprintf("svc-%03d", i), tcp(80, member("198.18.0.11", int32(61000+i))), udp(53))
		st := f.ensure(lb)
		want = append(want, withVIPs(lb, st.VIPs...))
	}
	if diff := cmp.Diff(want, f.list()); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
}

func TestProvider_shortensLongNames(t *testing.T) {
	long := strings.Repeat("k", 250)
	f := newFixture(t, fixtureOptions{cluster: long})
	name := lbmodel.LoadBalancerName(long, "ns", "web")
	lb := &lbmodel.LoadBalancer{Name: name, Service: "ns/web",
		Listeners: []lbmodel.Listener{listener(name, lbmodel.TCP, 80, member("198.18.0.11", 61000))}}

	f.ensure(lb)

	for _, typ := range []string{"vsvip", "pool", "l4policyset", "virtualservice"} {
		for _, n := range f.names(typ) {
			if len(n) > maxNameLength {
				t.Errorf("%s name has %d bytes, more than %d", typ, len(n), maxNameLength)
			}
		}
	}
	if diff := cmp.Diff([]lbmodel.LoadBalancer{withVIPs(lb, "198.18.200.1")}, f.list()); diff != "" {
		t.Errorf("List reports the names npl-lbsync uses (-want +got):\n%s", diff)
	}
	f.sim.ResetCounters()
	f.ensure(lb)
	if n := f.sim.Writes(); n != 0 {
		t.Errorf("second Ensure: %d writes", n)
	}
	if err := f.p.Delete(context.Background(), name, lbmodel.L4); err != nil {
		t.Fatal(err)
	}
	if got := f.list(); len(got) != 0 {
		t.Errorf("after Delete: %v", got)
	}
}

func TestProvider_concurrentEnsures(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lb := webLB(fmt.Sprintf("svc-%02d", i), tcp(80, member("198.18.0.11", int32(61000+i))))
			if _, err := f.v.Ensure(context.Background(), lb); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := len(f.list()); got != n {
		t.Errorf("List: %d load balancers, want %d", got, n)
	}
	if logins := f.sim.Calls()["POST login"]; logins > maxSessions {
		t.Errorf("%d logins for %d sessions at most", logins, maxSessions)
	}
}

func TestOpen(t *testing.T) {
	t.Run("wrong password", func(t *testing.T) {
		sim := avisim.New(avisim.Options{Password: "right"})
		if _, err := sim.Start(); err != nil {
			t.Fatal(err)
		}
		defer sim.Close()
		dir := t.TempDir()
		cfg := &Config{Controller: sim.Host(), Tenant: "admin", UsernameFile: writeFile(t, dir, "u", "admin"),
			PasswordFile: writeFile(t, dir, "p", "wrong"), CAFile: writeFile(t, dir, "ca", string(sim.CACertPEM())),
			Timeout: 5 * time.Second, ClusterName: cluster}
		_, err := cfg.Open(context.Background())
		if err == nil || !strings.Contains(err.Error(), "Avi 401: Invalid credentials") || strings.Contains(err.Error(), "wrong") {
			t.Errorf("got %v, want Avi 401 without the password", err)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		sim := avisim.New(avisim.Options{})
		if _, err := sim.Start(); err != nil {
			t.Fatal(err)
		}
		defer sim.Close()
		dir := t.TempDir()
		cfg := &Config{Controller: sim.Host(), Tenant: "admin", UsernameFile: writeFile(t, dir, "u", "admin"),
			PasswordFile: writeFile(t, dir, "p", "admin"), CAFile: caFile(t, dir), Timeout: 5 * time.Second, ClusterName: cluster}
		_, err := cfg.Open(context.Background())
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("got %v, want a certificate error", err)
		}
	})
	t.Run("version from the controller", func(t *testing.T) {
		f := newFixture(t, fixtureOptions{sim: avisim.Options{Version: "30.2.1"}})
		if f.p.version != "30.2.1" {
			t.Errorf("version: got %q, want 30.2.1", f.p.version)
		}
	})
	t.Run("a controller older than markers", func(t *testing.T) {
		sim := avisim.New(avisim.Options{Version: "20.1.4"})
		if _, err := sim.Start(); err != nil {
			t.Fatal(err)
		}
		defer sim.Close()
		dir := t.TempDir()
		cfg := &Config{Controller: sim.Host(), Tenant: "admin", UsernameFile: writeFile(t, dir, "u", "admin"),
			PasswordFile: writeFile(t, dir, "p", "admin"), CAFile: writeFile(t, dir, "ca", string(sim.CACertPEM())),
			Timeout: 5 * time.Second, ClusterName: cluster}
		if _, err := cfg.Open(context.Background()); err == nil || !strings.Contains(err.Error(), "API version 20.1.4 is older than 20.1.5") {
			t.Errorf("got %v, want the version refused", err)
		}
	})
}

// The provider works the same with every API version it supports: the
// simulator checks its bodies against each version's schema.
func TestProvider_eachSupportedAPIVersion(t *testing.T) {
	for _, version := range []string{"20.1.5", "20.1.7", "22.1.3", "30.2.1"} {
		t.Run(version, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{sim: avisim.Options{Version: version}})
			l4 := webLB("web", tcp(80, member("198.18.0.11", 61000)), udp(53, member("198.18.0.12", 61001)))
			f.ensure(l4)
			f.sim.ResetCounters()
			f.ensure(l4)
			if w := f.writes(); len(w) != 0 {
				t.Errorf("second Ensure wrote %v", w)
			}
			if err := f.v.Delete(context.Background(), l4.Name, lbmodel.L4); err != nil {
				t.Fatal(err)
			}
			gw := withL4(gatewayLB(t, tlsCert(t, "gw-tls", "shop.example.com")))
			for _, lb := range []*lbmodel.LoadBalancer{ingressLB(tlsCert(t, "shop-tls", "shop.example.com")), gw} {
				if _, err := f.p.Ensure(context.Background(), lb); err != nil {
					t.Fatalf("Ensure %s: %v", lb.Name, err)
				}
				if err := f.p.Delete(context.Background(), lb.Name, lbmodel.L7); err != nil {
					t.Fatal(err)
				}
			}
			if n := f.sim.SchemaViolations(); n != 0 {
				t.Errorf("%d schema violations", n)
			}
		})
	}
}
