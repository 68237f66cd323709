package avi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmware/alb-sdk/go/models"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/providertest"
	"github.com/nodeportlocal/npl/test/harness/sim/avi/avisim"
)

// Every value the policy mapping sends is one the controller's schema
// allows, and the defaults it relies on are the schema's.
func TestPolicyValues_matchTheSchema(t *testing.T) {
	enums := []struct {
		typ   string
		path  []string
		ours  []string
		items bool
	}{
		{"pool", []string{"lb_algorithm"}, []string{algorithmRoundRobin, algorithmLeastConnections, algorithmConsistentHash}, false},
		{"pool", []string{"lb_algorithm_hash"}, []string{hashSourceIP, hashCustomHeader}, false},
		{"healthmonitor", []string{"type"}, []string{monitorTypeTCP, monitorTypeHTTP}, false},
		{"healthmonitor", []string{"http_monitor", "http_response_code"}, statusClasses[1:], true},
		{"applicationpersistenceprofile", []string{"persistence_type"}, []string{persistClientIP, persistHTTPCookie}, false},
	}
	for _, e := range enums {
		p := schemaField(t, e.typ, e.path...)
		enum := p.Enum
		if e.items {
			enum = p.Items.Enum
		}
		for _, v := range e.ours {
			if !slices.Contains(enum, v) {
				t.Errorf("%s %s: %s is not in the schema's %v", e.typ, strings.Join(e.path, "."), v, enum)
			}
		}
	}
	ranges := []struct {
		typ    string
		path   []string
		lo, hi int64
	}{
		{"pool", []string{"connection_ramp_duration"}, 1, maxRampMinutes},
		{"pool", []string{"graceful_disable_timeout"}, 1, maxGracefulMinutes},
		{"healthmonitor", []string{"send_interval"}, 1, 3600},
		{"healthmonitor", []string{"receive_timeout"}, 1, maxReceiveTimeout},
		{"applicationpersistenceprofile", []string{"ip_persistence_profile", "ip_persistent_timeout"}, 1, maxIPPersistMinutes},
		{"applicationpersistenceprofile", []string{"http_cookie_persistence_profile", "timeout"}, 1, maxCookieMinutes},
	}
	for _, r := range ranges {
		if p := schemaField(t, r.typ, r.path...); p.Range == nil || p.Range[0] != r.lo || p.Range[1] != r.hi {
			t.Errorf("%s %s: the schema allows %v, the provider assumes %d-%d", r.typ, strings.Join(r.path, "."), p.Range, r.lo, r.hi)
		}
	}
	// The model's rise and fall (1-10) fit Avi's checks (1-50).
	for _, f := range []string{"successful_checks", "failed_checks"} {
		if p := schemaField(t, "healthmonitor", f); p.Range == nil || p.Range[0] > 1 || p.Range[1] < 10 {
			t.Errorf("healthmonitor %s allows %v, not 1-10", f, p.Range)
		}
	}
	defaults := map[string]int32{"send_interval": defaultSendInterval, "receive_timeout": defaultReceiveTimeout,
		"successful_checks": defaultSuccessfulChecks, "failed_checks": defaultFailedChecks}
	for f, want := range defaults {
		if got := schemaField(t, "healthmonitor", f).Default; got != float64(want) {
			t.Errorf("healthmonitor %s defaults to %v, the provider assumes %d", f, got, want)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// How each policy field becomes Avi's, and what is reported where Avi's
// value differs from the model's.
func TestPoolPolicy_mapping(t *testing.T) {
	p := &Provider{cfg: &Config{ClusterName: cluster}, version: "20.1.7"}
	hm := func(s monitorSpec) monitorSpec {
		s.Markers = markers{Cluster: cluster}
		s.Name = p.ownedName(monitorNamePart, monitorSettings(s))
		return s
	}
	prst := func(s persistenceSpec) persistenceSpec {
		s.Markers = markers{Cluster: cluster}
		s.Name = p.ownedName(persistenceNamePart, persistenceSettings(s))
		return s
	}
	rr := func(change func(*poolPolicySpec)) *poolPolicySpec {
		s := &poolPolicySpec{Algorithm: algorithmRoundRobin}
		if change != nil {
			change(s)
		}
		return s
	}
	tcpHM := hm(monitorSpec{Type: monitorTypeTCP, Interval: 5, Timeout: 4, Rise: 2, Fall: 2})
	httpHM := hm(monitorSpec{Type: monitorTypeHTTP, Interval: 10, Timeout: 4, Rise: 3, Fall: 2, Request: "GET /healthz HTTP/1.0",
		Codes: []string{"HTTP_2XX", "HTTP_3XX"}})
	clientIP := prst(persistenceSpec{Type: persistClientIP, IPTimeout: 180})
	cookie := prst(persistenceSpec{Type: persistHTTPCookie, CookieName: "session", CookieTimeout: 60})
	sessionCookie := prst(persistenceSpec{Type: persistHTTPCookie, CookieName: "session"})
	persistentCookie := prst(persistenceSpec{Type: persistHTTPCookie, CookieName: "session", CookieTimeout: 60, PersistentCookie: true})
	for _, tc := range []struct {
		name         string
		version      string // the API version, 20.1.7 when empty
		policy       *lbmodel.Policy
		weights      int
		wantMonitors []string
		wantGraceful int32
		want         *poolPolicySpec
		wantHM       []monitorSpec
		wantPersist  []persistenceSpec
		wantWarnings []string
		// applied changes the policy into the one applied; nil: the same.
		applied func(*lbmodel.Policy)
	}{
		{name: "no policy: the controller's defaults", wantMonitors: []string{monitorTCP}, wantGraceful: 1},
		{name: "a policy sets round robin and no ramp", policy: &lbmodel.Policy{MaxConnectionsPerMember: 100},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: rr(func(s *poolPolicySpec) { s.MaxConnections = 100 })},
		{name: "drain in whole minutes", policy: &lbmodel.Policy{DrainSeconds: ptrTo[int32](90)},
			wantMonitors: []string{monitorTCP}, wantGraceful: 2, want: rr(nil),
			applied: func(p *lbmodel.Policy) { *p.DrainSeconds = 120 }},
		{name: "no drain is immediate", policy: &lbmodel.Policy{DrainSeconds: ptrTo[int32](0)},
			wantMonitors: []string{monitorTCP}, wantGraceful: 0, want: rr(nil)},
		{name: "least connections", policy: &lbmodel.Policy{Algorithm: &lbmodel.Algorithm{Type: lbmodel.LeastConnections}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: &poolPolicySpec{Algorithm: algorithmLeastConnections}},
		{name: "a hash on the source", policy: &lbmodel.Policy{Algorithm: &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashSourceIP}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: &poolPolicySpec{Algorithm: algorithmConsistentHash, Hash: hashSourceIP}},
		{name: "a hash on a header",
			policy:       &lbmodel.Policy{Algorithm: &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashHeader, HashName: "X-User"}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1,
			want: &poolPolicySpec{Algorithm: algorithmConsistentHash, Hash: hashCustomHeader, HashHeader: "X-User"}},
		{name: "slow start of whole minutes", policy: &lbmodel.Policy{SlowStartSeconds: 120},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: rr(func(s *poolPolicySpec) { s.RampMinutes = 2 })},
		{name: "slow start rounded up to a minute", policy: &lbmodel.Policy{SlowStartSeconds: 90},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: rr(func(s *poolPolicySpec) { s.RampMinutes = 2 }),
			wantWarnings: []string{"pool p: policy slowStartSeconds 90 is 2 minutes on Avi (connection_ramp_duration is in whole minutes)"},
			applied:      func(p *lbmodel.Policy) { p.SlowStartSeconds = 120 }},
		{name: "a TCP check of the defaults is System-TCP", policy: &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: rr(nil)},
		{name: "a TCP check every 5 seconds",
			policy:       &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 5}},
			wantMonitors: []string{tcpHM.Name}, wantGraceful: 1, want: rr(nil), wantHM: []monitorSpec{tcpHM}},
		{name: "a check timeout of the interval",
			policy:       &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 5, TimeoutSeconds: 5}},
			wantMonitors: []string{tcpHM.Name}, wantGraceful: 1, want: rr(nil), wantHM: []monitorSpec{tcpHM},
			wantWarnings: []string{"pool p: policy healthCheck.timeoutSeconds 5 is 4 seconds on Avi (its receive timeout is below the interval, at most 2400)"},
			applied:      func(p *lbmodel.Policy) { p.HealthCheck.TimeoutSeconds = 4 }},
		{name: "a check every second",
			policy:       &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 1}},
			wantMonitors: []string{hm(monitorSpec{Type: monitorTypeTCP, Interval: 2, Timeout: 1, Rise: 2, Fall: 2}).Name}, wantGraceful: 1,
			want: rr(nil), wantHM: []monitorSpec{hm(monitorSpec{Type: monitorTypeTCP, Interval: 2, Timeout: 1, Rise: 2, Fall: 2})},
			wantWarnings: []string{"pool p: policy healthCheck.intervalSeconds 1 is 2 seconds on Avi (its receive timeout must be below the interval, and at least 1 second)"},
			applied:      func(p *lbmodel.Policy) { p.HealthCheck.IntervalSeconds = 2 }},
		{name: "an HTTP check of the default statuses",
			policy:       &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz", Rise: 3}},
			wantMonitors: []string{httpHM.Name}, wantGraceful: 1, want: rr(nil), wantHM: []monitorSpec{httpHM}},
		{name: "an HTTP check of a host and some statuses",
			policy: &lbmodel.Policy{HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/", Host: "app.example.com",
				ExpectedStatuses: []lbmodel.StatusRange{{Min: 200, Max: 204}}}},
			wantMonitors: []string{hm(monitorSpec{Type: monitorTypeHTTP, Interval: 10, Timeout: 4, Rise: 2, Fall: 2,
				Request: "GET / HTTP/1.1\r\nHost: app.example.com\r\nConnection: close\r\n\r\n", Exact: true, Codes: []string{"HTTP_2XX"}}).Name},
			wantGraceful: 1, want: rr(nil),
			wantHM: []monitorSpec{hm(monitorSpec{Type: monitorTypeHTTP, Interval: 10, Timeout: 4, Rise: 2, Fall: 2,
				Request: "GET / HTTP/1.1\r\nHost: app.example.com\r\nConnection: close\r\n\r\n", Exact: true, Codes: []string{"HTTP_2XX"}})},
			wantWarnings: []string{"pool p: policy healthCheck.expectedStatuses 200-204 are checked as [HTTP_2XX] on Avi (it checks whole classes of statuses)"},
			applied: func(p *lbmodel.Policy) {
				p.HealthCheck.ExpectedStatuses = []lbmodel.StatusRange{{Min: 200, Max: 299}}
			}},
		{name: "client IP persistence without a timeout is the system profile",
			policy:       &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: rr(func(s *poolPolicySpec) { s.Persistence = systemPersistClientIP })},
		{name: "client IP persistence of Kubernetes' default timeout",
			policy:       &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 10800}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: rr(func(s *poolPolicySpec) { s.Persistence = clientIP.Name }),
			wantPersist: []persistenceSpec{clientIP}},
		{name: "client IP persistence longer than Avi's",
			policy:       &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 86400}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1,
			want: rr(func(s *poolPolicySpec) {
				s.Persistence = prst(persistenceSpec{Type: persistClientIP, IPTimeout: 720}).Name
			}),
			wantPersist:  []persistenceSpec{prst(persistenceSpec{Type: persistClientIP, IPTimeout: 720})},
			wantWarnings: []string{"pool p: policy persistence.timeoutSeconds 86400 is 720 minutes on Avi (whole minutes, at most 720)"},
			applied:      func(p *lbmodel.Policy) { p.Persistence.TimeoutSeconds = 43200 }},
		{name: "a session cookie",
			policy:       &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "session"}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: rr(func(s *poolPolicySpec) { s.Persistence = sessionCookie.Name }),
			wantPersist: []persistenceSpec{sessionCookie}},
		{name: "a session cookie with a lifetime",
			policy:       &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "session", TimeoutSeconds: 3600}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: rr(func(s *poolPolicySpec) { s.Persistence = cookie.Name }),
			wantPersist: []persistenceSpec{cookie},
			wantWarnings: []string{"pool p: policy persistence.timeoutSeconds does not end a session cookie on Avi, which honours it " +
				"past its timeout while the browser's session lasts (a permanent cookie's ends)"},
			applied: func(p *lbmodel.Policy) { p.Persistence.TimeoutSeconds = 0 }},
		{name: "a permanent cookie before 21.1.3",
			policy: &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "session", TimeoutSeconds: 3600,
				Permanent: true}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: rr(func(s *poolPolicySpec) { s.Persistence = cookie.Name }),
			wantPersist:  []persistenceSpec{cookie},
			wantWarnings: []string{"pool p: policy persistence.permanent needs Avi API 21.1.3 or later, the controller speaks 20.1.7"},
			applied:      func(p *lbmodel.Policy) { p.Persistence.Permanent, p.Persistence.TimeoutSeconds = false, 0 }},
		{name: "a permanent cookie from 21.1.3", version: "22.1.3",
			policy: &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "session", TimeoutSeconds: 3600,
				Permanent: true}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1, want: rr(func(s *poolPolicySpec) { s.Persistence = persistentCookie.Name }),
			wantPersist: []persistenceSpec{persistentCookie}},
		{name: "persistence and a hash across the pools of several weights", weights: 2,
			policy: &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP},
				Algorithm: &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashSourceIP}},
			wantMonitors: []string{monitorTCP}, wantGraceful: 1,
			want: &poolPolicySpec{Algorithm: algorithmConsistentHash, Hash: hashSourceIP, Persistence: systemPersistClientIP},
			wantWarnings: []string{
				"pool p: policy algorithm.type=ConsistentHash holds among members of one weight only on Avi (a pool group picks the pool of a weight first)",
				"pool p: policy persistence holds among members of one weight only on Avi (a pool group picks the pool of a weight first)",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.version = "20.1.7"
			if tc.version != "" {
				p.version = tc.version
			}
			var o policyObjects
			var spec poolSpec
			applied := p.poolPolicy(&o, &spec, lbmodel.Pool{Name: "p", Policy: tc.policy}, monitorTCP, max(tc.weights, 1))
			if diff := cmp.Diff(tc.wantMonitors, spec.Monitors); diff != "" {
				t.Errorf("monitors (-want +got):\n%s", diff)
			}
			if spec.Graceful != tc.wantGraceful {
				t.Errorf("graceful_disable_timeout %d, want %d", spec.Graceful, tc.wantGraceful)
			}
			if diff := cmp.Diff(tc.want, spec.Policy); diff != "" {
				t.Errorf("pool fields (-want +got):\n%s", diff)
			}
			wantApplied := tc.policy.Clone()
			if tc.applied != nil {
				tc.applied(wantApplied)
			}
			if diff := cmp.Diff(wantApplied, applied); diff != "" {
				t.Errorf("the policy applied (-want +got):\n%s", diff)
			}
			if (spec.Record != "") != (tc.policy != nil) {
				t.Errorf("record %q of policy %v", spec.Record, tc.policy)
			}
			if diff := cmp.Diff(tc.wantHM, o.monitors); diff != "" {
				t.Errorf("health monitors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPersist, o.persistence); diff != "" {
				t.Errorf("persistence profiles (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWarnings, o.warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// ownedObjects are the names of npl's monitors and persistence profiles in
// the simulator.
func (f *fixture) ownedObjects() []string {
	var out []string
	for _, typ := range []string{monitorKind.typ, persistenceKind.typ} {
		for _, n := range f.names(typ) {
			if strings.HasPrefix(n, cluster+"--") {
				out = append(out, typ+" "+n)
			}
		}
	}
	slices.Sort(out)
	return out
}

func poolNamed(t *testing.T, f *fixture, name string) *models.Pool {
	t.Helper()
	for _, o := range objects[models.Pool](f, poolKind.typ) {
		if deref(o.Name) == name {
			return o
		}
	}
	t.Fatalf("no pool %s", name)
	return nil
}

// A policy's objects are created before the pools that use them, shared by
// the load balancers whose pools want the same settings, kept while one
// uses them and deleted with the last; the pools carry the policy's
// fields, and lose them with it.
func TestProvider_policyObjectsAreSharedAndCollected(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	pol := &lbmodel.Policy{
		Persistence:             &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 10800},
		HealthCheck:             &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz", IntervalSeconds: 5},
		Algorithm:               &lbmodel.Algorithm{Type: lbmodel.LeastConnections},
		SlowStartSeconds:        120,
		DrainSeconds:            ptrTo[int32](300),
		MaxConnectionsPerMember: 50,
	}
	web := webLB("web", tcp(80, member("198.18.0.11", 61000)), udp(53, member("198.18.0.11", 61001)))
	shop := webLB("shop", tcp(443, member("198.18.0.12", 61000)))
	for _, lb := range []*lbmodel.LoadBalancer{providertest.WithPolicy(web, pol), providertest.WithPolicy(shop, pol)} {
		st := f.ensure(lb)
		// UDP pools have no health check on Avi: the one field reported.
		want := []string(nil)
		if lb.Name == web.Name {
			want = []string{"pool " + web.Listeners[1].Pool.Name + ": policy healthCheck.type=HTTP is not supported by the avi provider"}
		}
		if diff := cmp.Diff(want, st.Warnings); diff != "" {
			t.Errorf("%s: warnings (-want +got):\n%s", lb.Name, diff)
		}
	}
	owned := f.ownedObjects()
	if len(owned) != 2 || !strings.HasPrefix(owned[0], "applicationpersistenceprofile c1--persist-") ||
		!strings.HasPrefix(owned[1], "healthmonitor c1--hm-") {
		t.Fatalf("npl's objects %v, want one persistence profile and one monitor that both load balancers share", owned)
	}
	monitor, profile := strings.Fields(owned[1])[1], strings.Fields(owned[0])[1]
	for _, o := range objects[models.HealthMonitor](f, monitorKind.typ) {
		if deref(o.Name) == monitor && markersOf(o.Markers).Cluster != cluster {
			t.Errorf("monitor %s has markers %v, want the cluster's", monitor, markersOf(o.Markers))
		}
	}
	for _, name := range []string{web.Listeners[0].Pool.Name, shop.Listeners[0].Pool.Name} {
		o := poolNamed(t, f, name)
		got := []any{refName(&o.HealthMonitorRefs[0]), refName(o.ApplicationPersistenceProfileRef), deref(o.LbAlgorithm),
			*o.ConnectionRampDuration, *o.GracefulDisableTimeout, *o.MaxConcurrentConnectionsPerServer}
		want := []any{monitor, profile, algorithmLeastConnections, int32(2), int32(5), int32(50)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("pool %s (-want +got):\n%s", name, diff)
		}
	}
	udpPool := poolNamed(t, f, web.Listeners[1].Pool.Name)
	if ref := refName(&udpPool.HealthMonitorRefs[0]); ref != monitorUDP {
		t.Errorf("UDP pool monitor %s, want %s", ref, monitorUDP)
	}

	// Applied again: nothing to write.
	f.sim.ResetCounters()
	f.ensure(providertest.WithPolicy(web, pol))
	if w := f.writes(); len(w) != 0 {
		t.Errorf("an unchanged policy wrote %v", w)
	}

	// One load balancer drops the policy: the objects stay for the other
	// (not even a delete is tried), its pool is back to the controller's
	// defaults.
	f.sim.ResetCounters()
	f.ensure(web)
	if got := f.ownedObjects(); !slices.Equal(got, owned) {
		t.Errorf("npl's objects %v after one load balancer dropped its policy, want %v", got, owned)
	}
	if w := f.writes(); !slices.Equal(w, []string{"PUT pool", "PUT pool"}) {
		t.Errorf("dropping the policy of a load balancer wrote %v, want a PUT of each of its two pools", w)
	}
	o := poolNamed(t, f, web.Listeners[0].Pool.Name)
	got := []any{refName(&o.HealthMonitorRefs[0]), o.ApplicationPersistenceProfileRef, deref(o.LbAlgorithm), *o.ConnectionRampDuration,
		*o.GracefulDisableTimeout, o.MaxConcurrentConnectionsPerServer}
	want := []any{monitorTCP, (*string)(nil), algorithmLeastConnections, int32(10), int32(gracefulDisableTimeout), (*int32)(nil)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pool without a policy (-want +got):\n%s", diff)
	}

	// The other changes its settings: the old objects go, new ones come.
	other := *pol
	other.HealthCheck = &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 3}
	f.ensure(providertest.WithPolicy(shop, &other))
	if got := f.ownedObjects(); len(got) != 2 || got[0] != owned[0] || got[1] == owned[1] {
		t.Errorf("npl's objects %v after a change of the check, want the profile %s and a new monitor", got, owned[0])
	}

	// Deleting the last load balancer that uses them deletes them, before
	// its VsVip.
	if err := f.v.Delete(context.Background(), shop.Name, lbmodel.L4); err != nil {
		t.Fatal(err)
	}
	if got := f.ownedObjects(); len(got) != 0 {
		t.Errorf("npl's objects %v after the last load balancer using them was deleted, want none", got)
	}
}

// What Avi does not express of a policy is reported, and the rest applied:
// Validated strips what PolicyCapabilities leaves out, the provider reports
// the values it rounds.
func TestProvider_policyReportsWhatAviDoesNotExpress(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := ingressLB(tlsCert(t, "tls", "shop.example.com"))
	lb.Pools[0].Policy = &lbmodel.Policy{
		Persistence:      &lbmodel.Persistence{Type: lbmodel.PersistHeader, Name: "X-Session"},
		Algorithm:        &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashCookie, HashName: "id"},
		SlowStartSeconds: 30,
		Retry:            &lbmodel.Retry{Attempts: 2},
	}
	lb.Pools[1].Policy = &lbmodel.Policy{
		Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "shop", TimeoutSeconds: 600, IdleTimeoutSeconds: 60},
		HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/ready"},
	}
	st := f.ensure(lb)
	blog, shop := lb.Pools[0].Name, lb.Pools[1].Name
	want := []string{
		// The provider's first, then those of the capabilities.
		"pool " + blog + ": policy slowStartSeconds 30 is 1 minutes on Avi (connection_ramp_duration is in whole minutes)",
		"pool " + shop + ": policy persistence.timeoutSeconds does not end a session cookie on Avi, which honours it " +
			"past its timeout while the browser's session lasts (a permanent cookie's ends)",
		"pool " + blog + ": policy persistence.type=Header is not supported by the avi provider",
		"pool " + blog + ": policy algorithm.hashOn=Cookie is not supported by the avi provider",
		"pool " + blog + ": policy retry is not supported by the avi provider",
		"pool " + shop + ": policy persistence.idleTimeoutSeconds is not supported by the avi provider",
	}
	if diff := cmp.Diff(want, st.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	o := poolNamed(t, f, shop)
	if !strings.HasPrefix(refName(o.ApplicationPersistenceProfileRef), cluster+persistenceNamePart) ||
		!strings.HasPrefix(refName(&o.HealthMonitorRefs[0]), cluster+monitorNamePart) {
		t.Errorf("pool %s refers to %s and %v, want npl's cookie profile and HTTP monitor", shop,
			refName(o.ApplicationPersistenceProfileRef), o.HealthMonitorRefs)
	}
	if b := poolNamed(t, f, blog); deref(b.LbAlgorithm) != algorithmRoundRobin || *b.ConnectionRampDuration != 1 {
		t.Errorf("pool %s: %s, ramp %d, want round robin and 1 minute", blog, deref(b.LbAlgorithm), *b.ConnectionRampDuration)
	}

	// An L7 load balancer's delete collects them too.
	if err := f.v.Delete(context.Background(), lb.Name, lbmodel.L7); err != nil {
		t.Fatal(err)
	}
	if got := f.ownedObjects(); len(got) != 0 {
		t.Errorf("npl's objects %v after the delete, want none", got)
	}
}

// A permanent cookie is Avi's persistent cookie from API 21.1.3 on, which
// the controller of that version takes and answers back.
func TestProvider_policyPersistentCookie(t *testing.T) {
	f := newFixture(t, fixtureOptions{sim: avisim.Options{Version: "22.1.3"}})
	lb := ingressLB(tlsCert(t, "tls", "shop.example.com"))
	lb.Pools[1].Policy = &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "shop",
		TimeoutSeconds: 7200, Permanent: true}}
	if st := f.ensure(lb); len(st.Warnings) != 0 {
		t.Errorf("warnings %v", st.Warnings)
	}
	var found bool
	for _, o := range f.sim.Objects("admin", persistenceKind.typ) {
		if c, _ := o["http_cookie_persistence_profile"].(map[string]any); strings.HasPrefix(o["name"].(string), cluster+"--") {
			found = c["is_persistent_cookie"] == true && fmt.Sprint(c["timeout"]) == "120" && c["cookie_name"] == "shop"
		}
	}
	if !found {
		t.Errorf("no persistent cookie profile of 120 minutes among %v", f.sim.Objects("admin", persistenceKind.typ))
	}
	f.sim.ResetCounters()
	f.ensure(lb)
	if w := f.writes(); len(w) != 0 {
		t.Errorf("an unchanged policy wrote %v", w)
	}
}

// A Gateway's pools of several weights each take the pool's policy; what
// holds only within one weight is reported.
func TestProvider_policyOnAGatewaysWeightedPools(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	lb := gatewayLB(t, tlsCert(t, "tls", "shop.example.com"))
	var weighted int
	for i, pl := range lb.Pools {
		if slices.ContainsFunc(pl.Members, func(m lbmodel.Member) bool { return m.Weight > 1 }) {
			weighted = i
		}
	}
	lb.Pools[weighted].Policy = &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "gw"},
		SlowStartSeconds: 60}
	st := f.ensure(lb)
	want := []string{"pool " + lb.Pools[weighted].Name +
		": policy persistence holds among members of one weight only on Avi (a pool group picks the pool of a weight first)"}
	if diff := cmp.Diff(want, st.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	var withProfile int
	for _, o := range objects[models.Pool](f, poolKind.typ) {
		if markersOf(o.Markers).Name == lb.Pools[weighted].Name {
			if !strings.HasPrefix(refName(o.ApplicationPersistenceProfileRef), cluster+persistenceNamePart) || *o.ConnectionRampDuration != 1 {
				t.Errorf("pool %s of the weighted pool group lacks the policy", deref(o.Name))
			}
			withProfile++
		}
	}
	if withProfile < 2 {
		t.Errorf("%d pools of the weighted pool group, want 2 or more", withProfile)
	}
	f.sim.ResetCounters()
	f.ensure(lb)
	if w := f.writes(); len(w) != 0 {
		t.Errorf("an unchanged Gateway wrote %v", w)
	}
}

// The life of a Service whose pool has a policy, as npl-lbsync drives the
// provider: its objects come with the policy and go with it, and garbage
// collection and `npl-lbsync cleanup` (List, then Delete of each load
// balancer) leave none, whatever load balancers shared them.
func TestProvider_policyLifecycleOfAService(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	pol := &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 600},
		HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckTCP, IntervalSeconds: 5}}
	web := webLB("web", tcp(80, member("198.18.0.11", 61000)))
	f.ensure(providertest.WithPolicy(web, pol))
	if got := f.ownedObjects(); len(got) != 2 {
		t.Fatalf("npl's objects %v, want a monitor and a persistence profile", got)
	}
	f.ensure(web)
	if got := f.ownedObjects(); len(got) != 0 {
		t.Errorf("npl's objects %v after the policy went, want none", got)
	}
	f.ensure(providertest.WithPolicy(web, pol))
	f.ensure(providertest.WithPolicy(webLB("shop", tcp(80, member("198.18.0.12", 61000))), pol))
	f.ensure(providertest.WithPolicy(ingressLB(tlsCert(t, "tls", "shop.example.com")), pol))
	lbs, err := f.v.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, lb := range lbs {
		if err := f.v.Delete(context.Background(), lb.Name, lb.Kind); err != nil {
			t.Fatalf("Delete %s: %v", lb.Name, err)
		}
	}
	if got := f.ownedObjects(); len(got) != 0 {
		t.Errorf("npl's objects %v after every load balancer was deleted, want none", got)
	}
}

// Policies' objects and fields are what every supported API version
// takes: the simulator checks the bodies against each version's schema.
func TestProvider_policyOnEachSupportedAPIVersion(t *testing.T) {
	for _, version := range []string{"20.1.5", "20.1.7", "22.1.3", "30.2.1"} {
		t.Run(version, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{sim: avisim.Options{Version: version}})
			lb := ingressLB(tlsCert(t, "tls", "shop.example.com"))
			lb.Pools[0].Policy = &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "c",
				TimeoutSeconds: 600, Permanent: true}, HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/", Host: "h.example"},
				Algorithm:        &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashHeader, HashName: "x-user"},
				SlowStartSeconds: 60, DrainSeconds: ptrTo[int32](120), MaxConnectionsPerMember: 10}
			lb.Pools[1].Policy = &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 600}}
			f.ensure(lb)
			f.sim.ResetCounters()
			f.ensure(lb)
			if w := f.writes(); len(w) != 0 {
				t.Errorf("second Ensure wrote %v", w)
			}
			if err := f.v.Delete(context.Background(), lb.Name, lbmodel.L7); err != nil {
				t.Fatal(err)
			}
			if n := f.sim.SchemaViolations(); n != 0 {
				t.Errorf("%d schema violations", n)
			}
			if got := f.ownedObjects(); len(got) != 0 {
				t.Errorf("npl's objects %v after the delete", got)
			}
		})
	}
}

// List reports a pool's policy as applied (Avi's values where they differ
// from the model's), so that nplctl compares it with what npl-lbsync asks
// for; a pool whose policy fields were changed by hand reports none, and
// the next Ensure repairs it.
func TestProvider_listReportsThePolicyAsApplied(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	pol := &lbmodel.Policy{SlowStartSeconds: 90, Algorithm: &lbmodel.Algorithm{Type: lbmodel.LeastConnections},
		Persistence: &lbmodel.Persistence{Type: lbmodel.PersistSourceIP, TimeoutSeconds: 600}}
	web := providertest.WithPolicy(webLB("web", tcp(80, member("198.18.0.11", 61000))), pol)
	ing := providertest.WithPolicy(ingressLB(tlsCert(t, "tls", "shop.example.com")), pol)
	gw := providertest.WithPolicy(gatewayLB(t, tlsCert(t, "gw", "shop.example.com")), pol)
	for _, lb := range []*lbmodel.LoadBalancer{web, ing, gw} {
		f.ensure(lb)
	}
	applied := pol.Clone()
	applied.SlowStartSeconds = 120
	for _, lb := range f.list() {
		pools := append([]lbmodel.Pool{}, lb.Pools...)
		for _, l := range lb.Listeners {
			if l.Protocol == lbmodel.TCP || l.Protocol == lbmodel.UDP {
				pools = append(pools, l.Pool)
			}
		}
		if len(pools) == 0 {
			t.Errorf("%s lists no pool", lb.Name)
		}
		for _, pl := range pools {
			if diff := cmp.Diff(applied, pl.Policy); diff != "" {
				t.Errorf("%s pool %s: policy (-want +got):\n%s", lb.Name, pl.Name, diff)
			}
		}
	}

	o := poolNamed(t, f, web.Listeners[0].Pool.Name)
	o.LbAlgorithm = ptr(algorithmRoundRobin)
	s, done, err := f.p.session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = update(s, poolKind.typ, deref(o.UUID), o)
	done()
	if err != nil {
		t.Fatalf("change the pool by hand: %v", err)
	}
	for _, lb := range f.list() {
		if lb.Name == web.Name && lb.Listeners[0].Pool.Policy != nil {
			t.Errorf("a pool changed by hand lists policy %+v, want none", lb.Listeners[0].Pool.Policy)
		}
	}
	f.ensure(web)
	for _, lb := range f.list() {
		if lb.Name == web.Name && !cmp.Equal(lb.Listeners[0].Pool.Policy, applied) {
			t.Errorf("after the repair, policy %+v, want %+v", lb.Listeners[0].Pool.Policy, applied)
		}
	}
}
