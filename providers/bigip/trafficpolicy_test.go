package bigip

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/providertest"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

func TestStatusPattern(t *testing.T) {
	for _, tc := range []struct {
		ranges []lbmodel.StatusRange
		want   string
	}{
		{nil, "(2[0-9][0-9]|3[0-9][0-9])"},
		{[]lbmodel.StatusRange{{Min: 200, Max: 200}}, "(200)"},
		{[]lbmodel.StatusRange{{Min: 200, Max: 204}, {Min: 301, Max: 302}}, "(20[01234]|30[12])"},
		{[]lbmodel.StatusRange{{Min: 200, Max: 219}, {Min: 404, Max: 404}}, "(20[0-9]|21[0-9]|404)"},
	} {
		got := statusPattern(tc.ranges)
		if got != tc.want {
			t.Errorf("statusPattern(%v) = %s, want %s", tc.ranges, got, tc.want)
		}
		re := regexp.MustCompile("^" + got + "$")
		ranges := tc.ranges
		if ranges == nil {
			ranges = []lbmodel.StatusRange{{Min: 200, Max: 399}}
		}
		for s := 100; s <= 599; s++ {
			want := slices.ContainsFunc(ranges, func(r lbmodel.StatusRange) bool { return int32(s) >= r.Min && int32(s) <= r.Max })
			if re.MatchString(strconv.Itoa(s)) != want {
				t.Errorf("%s matches %d: %v, want %v", got, s, !want, want)
			}
		}
	}
}

func TestExpiration(t *testing.T) {
	for s, want := range map[int32]string{3600: "0:1:0:0", 90061: "1:1:1:1", 59: "0:0:0:59"} {
		if got := formatExpiration(s); got != want {
			t.Errorf("formatExpiration(%d) = %s, want %s", s, got, want)
		}
		if got := expirationSeconds(want); got != int64(s) {
			t.Errorf("expirationSeconds(%s) = %d, want %d", want, got, s)
		}
	}
	for v, want := range map[string]int64{"0": 0, "1:0:0": 3600, "30:0": 1800, "x": -1, "1:2:3:4:5": -1} {
		if got := expirationSeconds(v); got != want {
			t.Errorf("expirationSeconds(%s) = %d, want %d", v, got, want)
		}
	}
}

// How each policy field becomes BIG-IP's, and what is reported.
func TestPoolPolicy_mapping(t *testing.T) {
	p := &provider{cfg: &Config{Partition: testPartition}}
	p.cfg.common.ClusterName = testCluster
	for _, tc := range []struct {
		name         string
		policy       *lbmodel.Policy
		weighted     bool
		want         poolPolicy // monitor, lbMode and persistPath as want; the rest of poolPolicy compared below
		wantMode     string
		wantObjects  []map[string]any
		wantWarnings []string
		// applied changes the policy into the one applied; nil: the same.
		applied func(*lbmodel.Policy)
	}{
		{name: "no policy", want: poolPolicy{monitor: "/Common/tcp"}, wantMode: roundRobin},
		{name: "no policy, weights", weighted: true, want: poolPolicy{monitor: "/Common/tcp"}, wantMode: ratioMember},
		{name: "least connections", policy: &lbmodel.Policy{Algorithm: &lbmodel.Algorithm{Type: lbmodel.LeastConnections}},
			want: poolPolicy{managed: true, leastConns: true, monitor: "/Common/tcp"}, wantMode: leastConnections},
		{name: "least connections, weights", weighted: true, policy: &lbmodel.Policy{Algorithm: &lbmodel.Algorithm{Type: lbmodel.LeastConnections}},
			want: poolPolicy{managed: true, leastConns: true, monitor: "/Common/tcp"}, wantMode: ratioLeastConnections},
		{name: "slow start and a limit", policy: &lbmodel.Policy{SlowStartSeconds: 45, MaxConnectionsPerMember: 100},
			want: poolPolicy{managed: true, monitor: "/Common/tcp", slowRamp: 45, connectionLimit: 100}, wantMode: roundRobin},
		{name: "a TCP check of the defaults is /Common/tcp", policy: &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP,
			IntervalSeconds: 5, Fall: 3, Rise: 1}}, want: poolPolicy{managed: true, monitor: "/Common/tcp"}, wantMode: roundRobin},
		{name: "a TCP check", policy: &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP,
			IntervalSeconds: 10, Fall: 2, Rise: 3, TimeoutSeconds: 4}}, want: poolPolicy{managed: true}, wantMode: roundRobin,
			wantObjects: []map[string]any{{"collection": "ltm/monitor/tcp", "defaultsFrom": "/Common/tcp", "interval": int32(10),
				"timeout": int32(21), "timeUntilUp": int32(20)}},
			wantWarnings: []string{"pool p: policy healthCheck.timeoutSeconds is not supported by the bigip provider"},
			applied:      func(p *lbmodel.Policy) { p.HealthCheck.TimeoutSeconds = 0 }},
		{name: "an HTTP check", policy: &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz",
			ExpectedStatuses: []lbmodel.StatusRange{{Min: 200, Max: 200}}}}, want: poolPolicy{managed: true}, wantMode: roundRobin,
			wantObjects: []map[string]any{{"collection": "ltm/monitor/http", "defaultsFrom": "/Common/http", "interval": int32(5),
				"timeout": int32(16), "timeUntilUp": int32(0), "send": `GET /healthz HTTP/1.0\r\n\r\n`, "recv": `^HTTP/1\.[01] (200)`}}},
		{name: "an HTTP check of a host", policy: &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/",
			Host: "app.example.com"}}, want: poolPolicy{managed: true}, wantMode: roundRobin,
			wantObjects: []map[string]any{{"collection": "ltm/monitor/http", "defaultsFrom": "/Common/http", "interval": int32(5),
				"timeout": int32(16), "timeUntilUp": int32(0), "send": `GET / HTTP/1.1\r\nHost: app.example.com\r\nConnection: Close\r\n\r\n`,
				"recv": `^HTTP/1\.[01] (2[0-9][0-9]|3[0-9][0-9])`}}},
		{name: "client IP persistence without a timeout is /Common/source_addr",
			policy: &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP}},
			want:   poolPolicy{managed: true, monitor: "/Common/tcp", persistPath: builtinSourceAddr}, wantMode: roundRobin},
		{name: "client IP persistence", policy: &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 10800}},
			want: poolPolicy{managed: true, monitor: "/Common/tcp"}, wantMode: roundRobin,
			wantObjects: []map[string]any{{"collection": "ltm/persistence/source-addr", "defaultsFrom": builtinSourceAddr, "timeout": "10800"}}},
		{name: "a session cookie", policy: &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "s"}},
			want: poolPolicy{managed: true, monitor: "/Common/tcp"}, wantMode: roundRobin,
			wantObjects: []map[string]any{{"collection": "ltm/persistence/cookie", "defaultsFrom": "/Common/cookie", "method": "insert",
				"cookieName": "s", "expiration": "0"}}},
		{name: "a session cookie with a lifetime", policy: &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie,
			Name: "s", TimeoutSeconds: 3600}}, want: poolPolicy{managed: true, monitor: "/Common/tcp"}, wantMode: roundRobin,
			wantObjects: []map[string]any{{"collection": "ltm/persistence/cookie", "defaultsFrom": "/Common/cookie", "method": "insert",
				"cookieName": "s", "expiration": "0"}},
			wantWarnings: []string{"pool p: policy persistence.timeoutSeconds is not supported by the bigip provider"},
			applied:      func(p *lbmodel.Policy) { p.Persistence.TimeoutSeconds = 0 }},
		{name: "a permanent cookie", policy: &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie,
			Name: "s", TimeoutSeconds: 3600, Permanent: true}}, want: poolPolicy{managed: true, monitor: "/Common/tcp"}, wantMode: roundRobin,
			wantObjects: []map[string]any{{"collection": "ltm/persistence/cookie", "defaultsFrom": "/Common/cookie", "method": "insert",
				"cookieName": "s", "expiration": "0:1:0:0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o policyObjects
			members := []lbmodel.Member{member("198.18.0.11", 61000)}
			if tc.weighted {
				members[0].Weight = 3
			}
			pp := p.poolPolicy(&o, lbmodel.Pool{Name: "p", Policy: tc.policy, Members: members}, "/Common/tcp")
			if pp.persist != nil {
				o.add(*pp.persist)
			}
			var objects []map[string]any
			for _, s := range o.objects {
				obj := map[string]any{"collection": s.kind.collection}
				for k, v := range s.settings {
					obj[k] = v
				}
				objects = append(objects, obj)
				if !strings.HasPrefix(s.name, testCluster+"--") {
					t.Errorf("object named %s", s.name)
				}
				if path := fullPath(testPartition, s.name); path != pp.monitor && path != pp.persistPath {
					t.Errorf("object %s is neither the monitor %s nor the persistence %s", path, pp.monitor, pp.persistPath)
				}
			}
			if diff := cmp.Diff(tc.wantObjects, objects); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			if tc.want.monitor == "" {
				tc.want.monitor = pp.monitor // npl's, checked above
			}
			if tc.want.persistPath == "" && pp.persist != nil {
				tc.want.persistPath = pp.persistPath
			}
			wantApplied := tc.policy.Clone()
			if tc.applied != nil {
				tc.applied(wantApplied)
			}
			if diff := cmp.Diff(wantApplied, pp.applied); diff != "" {
				t.Errorf("the policy applied (-want +got):\n%s", diff)
			}
			pp.persist, pp.applied = nil, nil
			if diff := cmp.Diff(tc.want, pp, cmp.AllowUnexported(poolPolicy{})); diff != "" {
				t.Errorf("pool policy (-want +got):\n%s", diff)
			}
			if got := pp.lbMode(members); got != tc.wantMode {
				t.Errorf("loadBalancingMode %s, want %s", got, tc.wantMode)
			}
			if diff := cmp.Diff(tc.wantWarnings, o.warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
	// Identical settings share a name; others do not.
	name := func(pol *lbmodel.Policy) string {
		var o policyObjects
		return p.poolPolicy(&o, lbmodel.Pool{Name: "x", Policy: pol}, "/Common/tcp").monitor
	}
	a := name(&lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 7}})
	b := name(&lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 7}, SlowStartSeconds: 3})
	c := name(&lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 8}})
	if a != b || a == c {
		t.Errorf("monitor names %s, %s, %s: want the first two equal, the third not", a, b, c)
	}
}

func (e *env) shared(t *testing.T) []string {
	t.Helper()
	var out []string
	d := e.sim.Dump()
	for _, o := range append(d.Monitors, d.Persistence...) {
		out = append(out, o.Type+" "+o.FullPath)
	}
	slices.Sort(out)
	return out
}

func virtualOf(t *testing.T, sim *bigipsim.Server, name string) bigipsim.Virtual {
	t.Helper()
	for _, v := range sim.Dump().Virtuals {
		if v.FullPath == "/"+testPartition+"/"+name {
			return v
		}
	}
	t.Fatalf("no virtual %s", name)
	return bigipsim.Virtual{}
}

// slowRampAndLimits reads a pool's slowRampTime and its members'
// connectionLimit as BIG-IP answers them.
func slowRampAndLimits(t *testing.T, e *env, pool string) []any {
	t.Helper()
	o := e.get(t, "/mgmt/tm/ltm/pool/~"+testPartition+"~"+pool+"?expandSubcollections=true")
	out := []any{o["slowRampTime"], o["loadBalancingMode"]}
	for _, m := range itemsOf(o["membersReference"]) {
		out = append(out, m["connectionLimit"])
	}
	return out
}

// A policy's objects are created before the pools and virtuals that use
// them, shared by the load balancers that want the same settings, kept
// while one uses them and deleted with the last; pools and virtuals carry
// the policy's fields, and BIG-IP's defaults again without it.
func TestProvider_policyObjectsAreSharedAndCollected(t *testing.T) {
	e := newEnv(t, envOptions{})
	pol := &lbmodel.Policy{
		Persistence:             &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 10800},
		HealthCheck:             &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz", IntervalSeconds: 10, Rise: 2},
		Algorithm:               &lbmodel.Algorithm{Type: lbmodel.LeastConnections},
		SlowStartSeconds:        30,
		MaxConnectionsPerMember: 100,
	}
	web := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)), udp(53, member("198.18.0.11", 61001)))
	shop := newLB("shop/shop", tcp(443, member("198.18.0.12", 61000)))
	for _, lb := range []*lbmodel.LoadBalancer{providertest.WithPolicy(web, pol), providertest.WithPolicy(shop, pol)} {
		st := e.ensure(t, lb)
		var want []string
		if lb.Name == web.Name {
			want = []string{"pool " + web.Listeners[1].Pool.Name + ": policy healthCheck.type=HTTP is not supported by the bigip provider"}
		}
		if diff := cmp.Diff(want, st.Warnings); diff != "" {
			t.Errorf("%s: warnings (-want +got):\n%s", lb.Name, diff)
		}
	}
	owned := e.shared(t)
	if len(owned) != 2 || !strings.HasPrefix(owned[0], "http /npl-c1/c1--hm-") || !strings.HasPrefix(owned[1], "source-addr /npl-c1/c1--persist-") {
		t.Fatalf("npl's objects %v, want one monitor and one persistence profile both load balancers share", owned)
	}
	monitor, profile := strings.Fields(owned[0])[1], strings.Fields(owned[1])[1]
	for _, d := range append(e.sim.Dump().Monitors, e.sim.Dump().Persistence...) {
		if !strings.Contains(d.Description, `"cluster":"c1"`) || !strings.Contains(d.Description, `"shared":true`) {
			t.Errorf("%s has description %s, want the cluster's shared tag", d.FullPath, d.Description)
		}
	}
	for _, lb := range []*lbmodel.LoadBalancer{web, shop} {
		name := lb.Listeners[0].Pool.Name
		if got := poolOf(t, e.sim, name).Monitor; got != monitor+" " {
			t.Errorf("pool %s monitor %q, want %s", name, got, monitor)
		}
		if diff := cmp.Diff([]any{float64(30), leastConnections, float64(100)}, slowRampAndLimits(t, e, name)); diff != "" {
			t.Errorf("pool %s (-want +got):\n%s", name, diff)
		}
		if got := virtualOf(t, e.sim, name).Persist; !slices.Equal(got, []string{profile}) {
			t.Errorf("virtual %s persist %v, want %s", name, got, profile)
		}
	}
	if got := poolOf(t, e.sim, web.Listeners[1].Pool.Name).Monitor; got != "/Common/udp " {
		t.Errorf("UDP pool monitor %q", got)
	}

	// Applied again, and by a provider that starts afresh: nothing written.
	e.sim.ResetCounters()
	e.ensure(t, providertest.WithPolicy(web, pol))
	e.prov = e.reopen(t)
	e.ensure(t, providertest.WithPolicy(web, pol))
	if w := e.sim.Writes(); w != 0 {
		t.Errorf("an unchanged policy wrote %d times: %v", w, e.sim.Calls())
	}

	// One load balancer drops the policy: the objects stay for the other
	// (not even a delete is tried), its pool and virtual are back to
	// BIG-IP's defaults.
	e.sim.ResetCounters()
	e.ensure(t, web)
	if n := e.sim.Count("DELETE", bigipsim.KindMonitor) + e.sim.Count("DELETE", bigipsim.KindPersistence); n != 0 {
		t.Errorf("%d deletes of monitors and persistence profiles another load balancer uses", n)
	}
	if got := e.shared(t); !slices.Equal(got, owned) {
		t.Errorf("npl's objects %v after one load balancer dropped its policy, want %v", got, owned)
	}
	name := web.Listeners[0].Pool.Name
	if diff := cmp.Diff([]any{float64(defaultSlowRamp), roundRobin, float64(0)}, slowRampAndLimits(t, e, name)); diff != "" {
		t.Errorf("pool without a policy (-want +got):\n%s", diff)
	}
	if got := poolOf(t, e.sim, name).Monitor; got != "/Common/tcp " {
		t.Errorf("pool without a policy: monitor %q", got)
	}
	if got := virtualOf(t, e.sim, name).Persist; len(got) != 0 {
		t.Errorf("virtual without a policy: persist %v", got)
	}
	if d := virtualOf(t, e.sim, name).Description; d != tagOf(web) {
		t.Errorf("virtual without a policy: description %s, want %s", d, tagOf(web))
	}
	e.sim.ResetCounters()
	e.ensure(t, web)
	if w := e.sim.Writes(); w != 0 {
		t.Errorf("a load balancer without a policy wrote %d times: %v", w, e.sim.Calls())
	}

	// The other changes its check: the old monitor goes, a new one comes.
	other := *pol
	other.HealthCheck = &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 3}
	e.ensure(t, providertest.WithPolicy(shop, &other))
	if got := e.shared(t); len(got) != 2 || got[0] != owned[1] || !strings.HasPrefix(got[1], "tcp /npl-c1/c1--hm-") {
		t.Errorf("npl's objects %v after a change of the check, want %s and a new tcp monitor", got, owned[1])
	}

	// Deleting the last load balancer that uses them deletes them.
	if err := e.prov.Delete(context.Background(), shop.Name, lbmodel.L4); err != nil {
		t.Fatal(err)
	}
	if got := e.shared(t); len(got) != 0 {
		t.Errorf("npl's objects %v after the last load balancer using them was deleted, want none", got)
	}
}

// On an L7 load balancer the persistence profile is the HTTP virtuals':
// it applies when every pool persists alike, and is reported otherwise.
// What BIG-IP does not express is reported and the rest applied.
func TestProvider_policyOnAnIngress(t *testing.T) {
	e := newEnv(t, envOptions{})
	lb := ingressLB(tlsCert(t, "tls", "shop.example.com"))
	cookie := &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "shop", TimeoutSeconds: 600, Permanent: true}
	lb.Pools[0].Policy = &lbmodel.Policy{Persistence: cookie,
		Algorithm: &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashHeader, HashName: "x-user"}}
	lb.Pools[1].Policy = &lbmodel.Policy{Persistence: cookie, Retry: &lbmodel.Retry{Attempts: 2}}
	st := e.ensure(t, lb)
	blog, shop := lb.Pools[0].Name, lb.Pools[1].Name
	want := []string{
		"pool " + blog + ": policy algorithm.type=ConsistentHash is not supported by the bigip provider",
		"pool " + shop + ": policy retry is not supported by the bigip provider",
	}
	if diff := cmp.Diff(want, st.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	owned := e.shared(t)
	if len(owned) != 1 || !strings.HasPrefix(owned[0], "cookie /npl-c1/c1--persist-") {
		t.Fatalf("npl's objects %v, want one cookie profile", owned)
	}
	for _, proto := range []lbmodel.Protocol{lbmodel.HTTP, lbmodel.HTTPS} {
		port := map[lbmodel.Protocol]int32{lbmodel.HTTP: 80, lbmodel.HTTPS: 443}[proto]
		v := virtualOf(t, e.sim, lbmodel.ListenerName(lb.Name, proto, port))
		if !slices.Equal(v.Persist, []string{strings.Fields(owned[0])[1]}) {
			t.Errorf("virtual %s persist %v, want %s", v.FullPath, v.Persist, owned[0])
		}
	}

	// Pools that persist differently: none applies, each is reported.
	lb.Pools[1].Policy = &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP}}
	st = e.ensure(t, lb)
	note := ": policy persistence is not applied on BIG-IP: it persists per virtual server, and the pools of the " +
		"load balancer's HTTP listeners do not all persist alike"
	want = []string{"pool " + blog + note, "pool " + shop + note,
		"pool " + blog + ": policy algorithm.type=ConsistentHash is not supported by the bigip provider"}
	if diff := cmp.Diff(want, st.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	if got := e.shared(t); len(got) != 0 {
		t.Errorf("npl's objects %v, want none: no virtual uses a profile", got)
	}
	if v := virtualOf(t, e.sim, lbmodel.ListenerName(lb.Name, lbmodel.HTTP, 80)); len(v.Persist) != 0 {
		t.Errorf("virtual %s persist %v, want none", v.FullPath, v.Persist)
	}
	if err := e.prov.Delete(context.Background(), lb.Name, lbmodel.L7); err != nil {
		t.Fatal(err)
	}
}

// The life of a Service whose pool has a policy, as npl-lbsync drives the
// provider: its objects come with the policy and go with it, and garbage
// collection and `npl-lbsync cleanup` (List, then Delete of each load
// balancer) leave none, whatever load balancers shared them.
func TestProvider_policyLifecycleOfAService(t *testing.T) {
	e := newEnv(t, envOptions{})
	pol := &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 600},
		HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 10}}
	web := newLB("shop/web", tcp(80, member("198.18.0.11", 61000)))
	e.ensure(t, providertest.WithPolicy(web, pol))
	if got := e.shared(t); len(got) != 2 {
		t.Fatalf("npl's objects %v, want a monitor and a persistence profile", got)
	}
	e.ensure(t, web)
	if got := e.shared(t); len(got) != 0 {
		t.Errorf("npl's objects %v after the policy went, want none", got)
	}
	e.ensure(t, providertest.WithPolicy(web, pol))
	e.ensure(t, providertest.WithPolicy(newLB("shop/shop", tcp(80, member("198.18.0.12", 61000))), pol))
	e.ensure(t, providertest.WithPolicy(ingressLB(tlsCert(t, "tls", "shop.example.com")), pol))
	lbs, err := e.prov.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, lb := range lbs {
		if err := e.prov.Delete(context.Background(), lb.Name, lb.Kind); err != nil {
			t.Fatalf("Delete %s: %v", lb.Name, err)
		}
	}
	if got := e.shared(t); len(got) != 0 {
		t.Errorf("npl's objects %v after every load balancer was deleted, want none", got)
	}
}

// A Gateway's TCP listener is a virtual of its own: it takes its pool's
// persistence, whatever the HTTP pools ask for.
func TestProvider_policyOnAGatewaysTCPListener(t *testing.T) {
	e := newEnv(t, envOptions{})
	name := lbmodel.GatewayLoadBalancerName(testCluster, "shop", "gw")
	pol := &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 600},
		Algorithm: &lbmodel.Algorithm{Type: lbmodel.LeastConnections}}
	lb := &lbmodel.LoadBalancer{
		Name: name, Kind: lbmodel.L7, Gateway: "shop/gw",
		Listeners: []lbmodel.Listener{
			{Port: 80, Protocol: lbmodel.HTTP},
			{Port: 5432, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(name, lbmodel.TCP, 5432), Policy: pol,
				Members: []lbmodel.Member{weighted("198.18.0.11", 61000, 2), member("198.18.0.12", 61001)}}},
		},
		Pools: []lbmodel.Pool{},
		HTTP:  &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{}},
	}
	if st := e.ensure(t, lb); len(st.Warnings) != 0 {
		t.Errorf("warnings %v", st.Warnings)
	}
	owned := e.shared(t)
	if len(owned) != 1 || !strings.HasPrefix(owned[0], "source-addr ") {
		t.Fatalf("npl's objects %v, want a source-addr profile", owned)
	}
	if v := virtualOf(t, e.sim, lbmodel.ListenerName(name, lbmodel.TCP, 5432)); !slices.Equal(v.Persist, []string{strings.Fields(owned[0])[1]}) {
		t.Errorf("TCP virtual persist %v", v.Persist)
	}
	if v := virtualOf(t, e.sim, lbmodel.ListenerName(name, lbmodel.HTTP, 80)); len(v.Persist) != 0 {
		t.Errorf("HTTP virtual persist %v, want none", v.Persist)
	}
	if mode := poolOf(t, e.sim, lbmodel.PoolName(name, lbmodel.TCP, 5432)).LoadBalancingMode; mode != ratioLeastConnections {
		t.Errorf("TCP pool mode %s, want %s", mode, ratioLeastConnections)
	}
	if err := e.prov.Delete(context.Background(), name, lbmodel.L7); err != nil {
		t.Fatal(err)
	}
	if got := e.shared(t); len(got) != 0 {
		t.Errorf("npl's objects %v after the delete", got)
	}
}

// List reports a pool's policy as applied (without what BIG-IP does not
// express of it), so that nplctl compares it with what npl-lbsync asks
// for; a pool whose policy fields were changed by hand reports none, and
// the next Ensure repairs it.
func TestProvider_listReportsThePolicyAsApplied(t *testing.T) {
	e := newEnv(t, envOptions{})
	pol := &lbmodel.Policy{SlowStartSeconds: 90, MaxConnectionsPerMember: 50, Algorithm: &lbmodel.Algorithm{Type: lbmodel.LeastConnections},
		HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 10, TimeoutSeconds: 3},
		Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 600}}
	web := providertest.WithPolicy(newLB("shop/web", tcp(80, member("198.18.0.11", 61000))), pol)
	ing := providertest.WithPolicy(ingressLB(tlsCert(t, "tls", "shop.example.com")), pol)
	for _, lb := range []*lbmodel.LoadBalancer{web, ing} {
		e.ensure(t, lb)
	}
	applied := pol.Clone()
	applied.HealthCheck.TimeoutSeconds = 0
	policyOf := func(lbName string) []*lbmodel.Policy {
		var out []*lbmodel.Policy
		for _, lb := range e.list(t) {
			if lb.Name != lbName {
				continue
			}
			for _, pl := range lb.Pools {
				out = append(out, pl.Policy)
			}
			for _, l := range lb.Listeners {
				if l.Protocol == lbmodel.TCP || l.Protocol == lbmodel.UDP {
					out = append(out, l.Pool.Policy)
				}
			}
		}
		return out
	}
	for _, lb := range []*lbmodel.LoadBalancer{web, ing} {
		got := policyOf(lb.Name)
		if len(got) == 0 {
			t.Errorf("%s lists no pool", lb.Name)
		}
		for _, p := range got {
			if diff := cmp.Diff(applied, p); diff != "" {
				t.Errorf("%s: policy (-want +got):\n%s", lb.Name, diff)
			}
		}
	}

	e.do(t, "PATCH", "/mgmt/tm/ltm/pool/~"+testPartition+"~"+web.Listeners[0].Pool.Name, map[string]any{"slowRampTime": 5})
	if got := policyOf(web.Name); len(got) != 1 || got[0] != nil {
		t.Errorf("a pool changed by hand lists policy %v, want none", got)
	}
	e.ensure(t, web)
	if got := policyOf(web.Name); len(got) != 1 || !cmp.Equal(got[0], applied) {
		t.Errorf("after the repair, policy %v, want %+v", got, applied)
	}
}
