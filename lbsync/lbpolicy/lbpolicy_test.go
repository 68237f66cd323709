package lbpolicy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func httpCheck(path string) *v1alpha1.HealthCheck {
	return &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, Path: path}
}

func TestToModel_convertsEveryField(t *testing.T) {
	tp := &v1alpha1.TrafficPolicy{
		Persistence: &v1alpha1.Persistence{Type: v1alpha1.PersistenceCookie, Name: "srv", TimeoutSeconds: ptr.To[int32](600), IdleTimeoutSeconds: ptr.To[int32](60)},
		HealthCheck: &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, Path: "/healthz", Host: "web.example.com",
			ExpectedStatuses: []v1alpha1.StatusRange{{Min: 200, Max: ptr.To[int32](204)}, {Min: 301}},
			IntervalSeconds:  ptr.To[int32](5), TimeoutSeconds: ptr.To[int32](2), HealthyThreshold: ptr.To[int32](3), UnhealthyThreshold: ptr.To[int32](4)},
		Algorithm:               &v1alpha1.Algorithm{Type: v1alpha1.AlgorithmConsistentHash, HashOn: v1alpha1.HashOnHeader, HashName: "X-User"},
		SlowStartSeconds:        ptr.To[int32](30),
		DrainSeconds:            ptr.To[int32](0),
		MaxConnectionsPerMember: ptr.To[int32](100),
	}
	want := &lbmodel.Policy{
		Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "srv", TimeoutSeconds: 600, IdleTimeoutSeconds: 60},
		HealthCheck: &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz", Host: "web.example.com",
			ExpectedStatuses: []lbmodel.StatusRange{{Min: 200, Max: 204}, {Min: 301, Max: 301}},
			IntervalSeconds:  5, TimeoutSeconds: 2, Rise: 3, Fall: 4},
		Algorithm:               &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashHeader, HashName: "X-User"},
		SlowStartSeconds:        30,
		DrainSeconds:            ptr.To[int32](0),
		MaxConnectionsPerMember: 100,
	}
	got, left := ToModel(tp, PoolHTTP)
	if diff := cmp.Diff(want, got); diff != "" || len(left) > 0 {
		t.Errorf("HTTP pool (-want +got):\n%s\nleft out %v", diff, left)
	}
	// A TCP pool has no cookie nor header: they are left out, and said.
	got, left = ToModel(tp, PoolTCP)
	wantTCP := *want
	wantTCP.Persistence, wantTCP.Algorithm = nil, nil
	if diff := cmp.Diff(&wantTCP, got); diff != "" {
		t.Errorf("TCP pool (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]NotApplied{{"persistence.type=Cookie", "only the pools of HTTP rules have it"},
		{"algorithm.hashOn=Header", "only the pools of HTTP rules have it"}}, left); diff != "" {
		t.Errorf("TCP pool: left out (-want +got):\n%s", diff)
	}
	// A UDP pool has no health check.
	got, left = ToModel(&v1alpha1.TrafficPolicy{HealthCheck: httpCheck("/")}, PoolUDP)
	if got != nil || len(left) != 1 || left[0].Field != "healthCheck" {
		t.Errorf("UDP pool: %+v, left out %v", got, left)
	}
	if got, _ := ToModel(&v1alpha1.TrafficPolicy{}, PoolTCP); got != nil {
		t.Errorf("an empty policy gave %+v", got)
	}
}

func TestResolve_oldestWinsFieldByField(t *testing.T) {
	older := &v1alpha1.TrafficPolicy{HealthCheck: httpCheck("/old"), SlowStartSeconds: ptr.To[int32](10)}
	newer := &v1alpha1.TrafficPolicy{HealthCheck: httpCheck("/new"), MaxConnectionsPerMember: ptr.To[int32](5)}
	shadowed := &v1alpha1.TrafficPolicy{SlowStartSeconds: ptr.To[int32](20)}
	r := Resolve([]Candidate{
		{Name: "newer", Created: t0.Add(time.Hour), Policy: newer},
		{Name: "shadowed", Created: t0.Add(2 * time.Hour), Policy: shadowed},
		// Created in the same second: the name breaks the tie.
		{Name: "b-older", Created: t0, Policy: &v1alpha1.TrafficPolicy{DrainSeconds: ptr.To[int32](5)}},
		{Name: "a-older", Created: t0, Policy: older},
		{Name: "invalid", Created: t0},
	})
	want := v1alpha1.TrafficPolicy{HealthCheck: httpCheck("/old"), SlowStartSeconds: ptr.To[int32](10),
		MaxConnectionsPerMember: ptr.To[int32](5), DrainSeconds: ptr.To[int32](5)}
	if diff := cmp.Diff(want, r.Policy); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{"a-older": {"healthCheck", "slowStartSeconds"}, "b-older": {"drainSeconds"},
		"newer": {"maxConnectionsPerMember"}}, r.Won); diff != "" {
		t.Errorf("won (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]Override{"newer": {{"healthCheck", "a-older"}}, "shadowed": {{"slowStartSeconds", "a-older"}}},
		r.Overridden); diff != "" {
		t.Errorf("overridden (-want +got):\n%s", diff)
	}
}

func TestOutcome_condition(t *testing.T) {
	for _, tt := range []struct {
		name    string
		o       Outcome
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"applied", Outcome{Won: []string{"healthCheck", "algorithm"}, Served: true},
			metav1.ConditionTrue, "Accepted", "applied: healthCheck, algorithm"},
		{"partly overridden and partly unserved", Outcome{Won: []string{"algorithm"}, Served: true,
			Overridden: []Override{{"healthCheck", "old"}}, Unserved: []string{"healthCheck.host on TCP pools: not supported by the x provider"}},
			metav1.ConditionTrue, "Accepted", "applied: algorithm; set by an older policy: healthCheck (by old); not served: healthCheck.host on TCP pools: not supported by the x provider"},
		{"every field overridden", Outcome{Overridden: []Override{{"healthCheck", "old"}, {"drainSeconds", "older"}}},
			metav1.ConditionFalse, "Conflicted", "every field it sets is set by an older policy: healthCheck (by old), drainSeconds (by older)"},
		{"nothing served", Outcome{Won: []string{"algorithm"}, Unserved: []string{"algorithm.hashOn=Cookie on TCP pools: only the pools of HTTP rules have it"}},
			metav1.ConditionFalse, "Invalid", "nothing of it is served: algorithm.hashOn=Cookie on TCP pools: only the pools of HTTP rules have it"},
		{"invalid, last spec kept", Outcome{Invalid: errors.New("bad"), KeptLast: true, Won: []string{"algorithm"}, Served: true},
			metav1.ConditionFalse, "Invalid", "bad; its last valid spec stays applied"},
		{"target not found", Outcome{NotFound: "Service shop/web not found", Invalid: errors.New("bad")},
			metav1.ConditionFalse, "TargetNotFound", "Service shop/web not found"},
		{"empty", Outcome{}, metav1.ConditionTrue, "Accepted", "sets nothing"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.o.Condition(7)
			if c.Type != "Accepted" || c.Status != tt.status || c.Reason != tt.reason || c.Message != tt.message || c.ObservedGeneration != 7 {
				t.Errorf("got %s %s %q (generation %d), want %s %s %q", c.Status, c.Reason, c.Message, c.ObservedGeneration, tt.status, tt.reason, tt.message)
			}
		})
	}
}

func TestServing_namesWhatTheProviderDoesNotExpress(t *testing.T) {
	caps := lbmodel.PolicyCapabilities{Provider: "edge",
		TCP:  lbmodel.PolicySupport{HealthChecks: []lbmodel.HealthCheckType{lbmodel.CheckTCP}, Algorithms: []lbmodel.AlgorithmType{lbmodel.LeastConnections}},
		HTTP: lbmodel.PolicySupport{HealthChecks: []lbmodel.HealthCheckType{lbmodel.CheckTCP, lbmodel.CheckHTTP}}}
	tp := &v1alpha1.TrafficPolicy{HealthCheck: httpCheck("/"), Algorithm: &v1alpha1.Algorithm{Type: v1alpha1.AlgorithmLeastConnections}}
	served, unserved := Serving(tp, []PoolKind{PoolTCP, PoolUDP, PoolHTTP}, caps)
	want := []string{
		"healthCheck.type=HTTP on TCP pools: not supported by the edge provider",
		"healthCheck on UDP pools: a UDP pool has no health check",
		"algorithm.type=LeastConnections on UDP pools: not supported by the edge provider",
		"algorithm.type=LeastConnections on HTTP pools: not supported by the edge provider",
	}
	if diff := cmp.Diff(want, unserved); diff != "" || !served {
		t.Errorf("served %v, unserved (-want +got):\n%s", served, diff)
	}
	// Nothing of it on a provider that expresses no policy.
	served, unserved = Serving(tp, []PoolKind{PoolTCP}, lbmodel.PolicyCapabilities{})
	if served || len(unserved) != 2 {
		t.Errorf("no capabilities: served %v, unserved %v", served, unserved)
	}
	// A drain needs no support: npl-lbsync keeps the members itself.
	if served, _ := Serving(&v1alpha1.TrafficPolicy{DrainSeconds: ptr.To[int32](3)}, []PoolKind{PoolUDP}, lbmodel.PolicyCapabilities{}); !served {
		t.Error("drainSeconds not served")
	}
}

func TestCheck(t *testing.T) {
	svc := []v1alpha1.LocalPolicyTargetReference{{Kind: "Service", Name: "web"}}
	for _, tt := range []struct {
		name string
		spec v1alpha1.LoadBalancerPolicySpec
		want string // "" valid
	}{
		{"valid", v1alpha1.LoadBalancerPolicySpec{TargetRefs: []v1alpha1.LocalPolicyTargetReference{svc[0],
			{Group: "gateway.networking.k8s.io", Kind: "Gateway", Name: "gw"}},
			TrafficPolicy: v1alpha1.TrafficPolicy{HealthCheck: httpCheck("/healthz"),
				Algorithm: &v1alpha1.Algorithm{Type: v1alpha1.AlgorithmConsistentHash, HashOn: v1alpha1.HashOnCookie, HashName: "id"}}}, ""},
		{"no target", v1alpha1.LoadBalancerPolicySpec{}, "targetRefs: no target"},
		{"a Deployment", v1alpha1.LoadBalancerPolicySpec{TargetRefs: []v1alpha1.LocalPolicyTargetReference{{Group: "apps", Kind: "Deployment", Name: "web"}}},
			`targetRefs: Deployment "web" (group "apps") is not a Service nor a Gateway`},
		{"a Gateway of the core group", v1alpha1.LoadBalancerPolicySpec{TargetRefs: []v1alpha1.LocalPolicyTargetReference{{Kind: "Gateway", Name: "gw"}}},
			`targetRefs: Gateway "gw" (group "") is not a Service nor a Gateway`},
		{"twice", v1alpha1.LoadBalancerPolicySpec{TargetRefs: append(svc, svc...)}, "targetRefs: Service web named twice"},
		{"a path without /", v1alpha1.LoadBalancerPolicySpec{TargetRefs: svc, TrafficPolicy: v1alpha1.TrafficPolicy{HealthCheck: httpCheck("healthz")}},
			`health check path "healthz" does not start with / or holds a blank or control character`},
		{"interval 0", v1alpha1.LoadBalancerPolicySpec{TargetRefs: svc, TrafficPolicy: v1alpha1.TrafficPolicy{
			HealthCheck: &v1alpha1.HealthCheck{Type: "TCP", IntervalSeconds: ptr.To[int32](0)}}}, "healthCheck.intervalSeconds: 0 is not positive"},
		{"a timeout beyond the interval", v1alpha1.LoadBalancerPolicySpec{TargetRefs: svc, TrafficPolicy: v1alpha1.TrafficPolicy{
			HealthCheck: &v1alpha1.HealthCheck{Type: "TCP", IntervalSeconds: ptr.To[int32](2), TimeoutSeconds: ptr.To[int32](3)}}},
			"health check timeout 3s is longer than its interval 2s"},
		{"an unknown algorithm", v1alpha1.LoadBalancerPolicySpec{TargetRefs: svc, TrafficPolicy: v1alpha1.TrafficPolicy{
			Algorithm: &v1alpha1.Algorithm{Type: "Random"}}}, `algorithm "Random" is not RoundRobin, LeastConnections or ConsistentHash`},
		{"a header hash without a name", v1alpha1.LoadBalancerPolicySpec{TargetRefs: svc, TrafficPolicy: v1alpha1.TrafficPolicy{
			Algorithm: &v1alpha1.Algorithm{Type: v1alpha1.AlgorithmConsistentHash, HashOn: v1alpha1.HashOnHeader}}}, `hash header name "" is not a token`},
		{"a hash without a key", v1alpha1.LoadBalancerPolicySpec{TargetRefs: svc, TrafficPolicy: v1alpha1.TrafficPolicy{
			Algorithm: &v1alpha1.Algorithm{Type: v1alpha1.AlgorithmConsistentHash}}}, "algorithm: a consistent hash needs hashOn"},
		{"a cookie without a name", v1alpha1.LoadBalancerPolicySpec{TargetRefs: svc, TrafficPolicy: v1alpha1.TrafficPolicy{
			Persistence: &v1alpha1.Persistence{Type: v1alpha1.PersistenceCookie}}}, "persistence: Cookie persistence needs a name"},
		{"a status range backwards", v1alpha1.LoadBalancerPolicySpec{TargetRefs: svc, TrafficPolicy: v1alpha1.TrafficPolicy{
			HealthCheck: &v1alpha1.HealthCheck{Type: "HTTP", Path: "/", ExpectedStatuses: []v1alpha1.StatusRange{{Min: 300, Max: ptr.To[int32](200)}}}}},
			"health check: expected statuses 300-200 are not a range within 100-599"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(&tt.spec)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestAttach(t *testing.T) {
	svcPolicy := &v1alpha1.TrafficPolicy{HealthCheck: httpCheck("/svc"), SlowStartSeconds: ptr.To[int32](0),
		Algorithm: &v1alpha1.Algorithm{Type: v1alpha1.AlgorithmConsistentHash, HashOn: v1alpha1.HashOnCookie, HashName: "id"}}
	gwPolicy := &v1alpha1.TrafficPolicy{HealthCheck: httpCheck("/gw"), SlowStartSeconds: ptr.To[int32](10), MaxConnectionsPerMember: ptr.To[int32](7),
		Persistence: &v1alpha1.Persistence{Type: v1alpha1.PersistenceSourceIP}}
	lookup := func(t Target) *v1alpha1.TrafficPolicy {
		switch t {
		case ServiceTarget("shop", "web"):
			return svcPolicy
		case GatewayTarget("shop", "gw"):
			return gwPolicy
		}
		return nil
	}
	native := &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "route"},
		Timeouts: &lbmodel.Timeouts{RequestMillis: 1000}}
	lb := &lbmodel.LoadBalancer{Kind: lbmodel.L7, Gateway: "shop/gw",
		Listeners: []lbmodel.Listener{{Protocol: lbmodel.HTTP, Port: 80}, {Protocol: lbmodel.TLS, Port: 443, SNI: []lbmodel.SNIRoute{{Pool: "tls"}}},
			{Protocol: lbmodel.TCP, Port: 5432, Pool: lbmodel.Pool{Name: "db"}}},
		Pools: []lbmodel.Pool{{Name: "only-web", Policy: native}, {Name: "web-and-api"}, {Name: "tls"}},
	}
	gw := GatewayTarget("shop", "gw")
	Attach(lb, &gw, map[string][]string{"only-web": {"shop/web"}, "web-and-api": {"shop/api", "shop/web"}, "db": {"shop/web"}}, lookup)
	hc := func(path string) *lbmodel.HealthCheck {
		return &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: path}
	}
	srcIP := &lbmodel.Persistence{Type: lbmodel.PersistSourceIP}
	want := map[string]*lbmodel.Policy{
		// The Service's policy over the Gateway's, field by field (an
		// explicit slow start of 0 wins), and the route's own fields over both.
		"only-web": {Persistence: native.Persistence, Timeouts: native.Timeouts, HealthCheck: hc("/svc"), MaxConnectionsPerMember: 7,
			Algorithm: &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashCookie, HashName: "id"}},
		// Two backends: the Gateway's alone.
		"web-and-api": {Persistence: srcIP, HealthCheck: hc("/gw"), SlowStartSeconds: 10, MaxConnectionsPerMember: 7},
		"tls":         {Persistence: srcIP, HealthCheck: hc("/gw"), SlowStartSeconds: 10, MaxConnectionsPerMember: 7},
		// A TCP pool: the Service's cookie hash does not apply.
		"db": {Persistence: srcIP, HealthCheck: hc("/svc"), MaxConnectionsPerMember: 7},
	}
	got := map[string]*lbmodel.Policy{"db": lb.Listeners[2].Pool.Policy}
	for _, p := range lb.Pools {
		got[p.Name] = p.Policy
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
	if native.HealthCheck != nil {
		t.Error("the builder's policy was modified")
	}
	if _, err := lbmodel.Normalize(&lbmodel.LoadBalancer{Name: "x", Kind: lbmodel.L7, Gateway: "shop/gw", Listeners: lb.Listeners[:2], Pools: lb.Pools,
		HTTP: &lbmodel.HTTPRoutes{Rules: []lbmodel.Rule{{Path: "/", PathType: lbmodel.PathPrefix, Pool: "only-web", Ports: []int32{80}}}}}); err != nil &&
		strings.Contains(err.Error(), "policy") {
		t.Errorf("the attached policies break the model's rules: %v", err)
	}

	// A Service's load balancer: every pool, nothing of an Ingress or Gateway.
	l4 := &lbmodel.LoadBalancer{Listeners: []lbmodel.Listener{{Protocol: lbmodel.UDP, Port: 53, Pool: lbmodel.Pool{Name: "dns"}}}}
	web := ServiceTarget("shop", "web")
	Attach(l4, &web, nil, lookup)
	if p := l4.Listeners[0].Pool.Policy; p != nil {
		t.Errorf("a UDP pool got %+v: a health check and a cookie hash do not apply, an explicit slow start of 0 is none", p)
	}
}

func TestAncestors_keepOthersAndTransitionTimes(t *testing.T) {
	earlier, now := metav1.NewTime(t0), metav1.NewTime(t0.Add(time.Hour))
	ours := v1alpha1.ControllerNameOf("c1")
	web, gone := ServiceTarget("shop", "web"), ServiceTarget("shop", "gone")
	theirs := v1alpha1.PolicyAncestorStatus{AncestorRef: web.Ref(), ControllerName: "example.org/other"}
	// Another installation's entry of the same target stays.
	otherInstallation := v1alpha1.PolicyAncestorStatus{AncestorRef: web.Ref(), ControllerName: v1alpha1.ControllerNameOf("c2"),
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionFalse, Reason: "TargetNotFound"}}}
	current := []v1alpha1.PolicyAncestorStatus{
		theirs, otherInstallation,
		{AncestorRef: web.Ref(), ControllerName: ours, Conditions: []metav1.Condition{
			{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "old", LastTransitionTime: earlier}}},
		{AncestorRef: gone.Ref(), ControllerName: ours},
	}
	desired := map[Target]metav1.Condition{web: {Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "new"}}
	got := Ancestors(current, ours, desired, now)
	want := []v1alpha1.PolicyAncestorStatus{theirs, otherInstallation, {AncestorRef: web.Ref(), ControllerName: ours,
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "new", LastTransitionTime: earlier}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ancestors (-want +got):\n%s", diff)
	}

	// Ours never take the list past MaxAncestors.
	full := make([]v1alpha1.PolicyAncestorStatus, MaxAncestors-1)
	for i := range full {
		full[i] = v1alpha1.PolicyAncestorStatus{AncestorRef: ServiceTarget("shop", fmt.Sprintf("s%d", i)).Ref(), ControllerName: "example.org/other"}
	}
	two := map[Target]metav1.Condition{web: desired[web], gone: desired[web]}
	if got := Ancestors(full, ours, two, now); len(got) != MaxAncestors || got[MaxAncestors-1].AncestorRef != gone.Ref() {
		t.Errorf("%d entries, the last %+v; want %d, the last for %s", len(got), got[len(got)-1].AncestorRef, MaxAncestors, gone)
	}
}

func TestTargets_ownNamespaceOnly(t *testing.T) {
	spec := &v1alpha1.LoadBalancerPolicySpec{TargetRefs: []v1alpha1.LocalPolicyTargetReference{
		{Kind: "Service", Name: "web"}, {Group: "gateway.networking.k8s.io", Kind: "Gateway", Name: "gw"},
		{Kind: "Service", Name: "web"}, {Group: "apps", Kind: "Deployment", Name: "web"}}}
	want := []Target{GatewayTarget("team-a", "gw"), ServiceTarget("team-a", "web")}
	if diff := cmp.Diff(want, Targets("team-a", spec)); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
}

// A policy's outcome on a target serves only the fields it won.
func TestResolution_outcomeOf(t *testing.T) {
	older := &v1alpha1.TrafficPolicy{Algorithm: &v1alpha1.Algorithm{Type: v1alpha1.AlgorithmLeastConnections}}
	newer := &v1alpha1.TrafficPolicy{Algorithm: &v1alpha1.Algorithm{Type: v1alpha1.AlgorithmRoundRobin}, HealthCheck: httpCheck("/")}
	r := Resolve([]Candidate{{Name: "old", Created: t0, Policy: older}, {Name: "new", Created: t0.Add(time.Second), Policy: newer}})
	caps := lbmodel.PolicyCapabilities{Provider: "p", TCP: lbmodel.PolicySupport{Algorithms: []lbmodel.AlgorithmType{lbmodel.LeastConnections}}}
	// The newer's health check is not expressed; its algorithm, which the
	// provider would not express either, is the older's anyway.
	o := r.OutcomeOf("new", newer, []PoolKind{PoolTCP}, caps)
	want := Outcome{Won: []string{"healthCheck"}, Overridden: []Override{{"algorithm", "old"}},
		Unserved: []string{"healthCheck.type=HTTP on TCP pools: not supported by the p provider"}}
	if diff := cmp.Diff(want, o, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("outcome (-want +got):\n%s", diff)
	}
	if c := o.Condition(1); c.Reason != "Invalid" {
		t.Errorf("condition %+v, want Invalid: nothing of it is served", c)
	}
	if o := r.OutcomeOf("old", older, []PoolKind{PoolTCP}, caps); !o.Served || len(o.Unserved) > 0 {
		t.Errorf("the older's outcome %+v", o)
	}
}

func TestIndex_mergesValidPoliciesPerTarget(t *testing.T) {
	at := func(ns, name string, created time.Time, svc string, tp v1alpha1.TrafficPolicy) *v1alpha1.LoadBalancerPolicy {
		return &v1alpha1.LoadBalancerPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(created)},
			Spec: v1alpha1.LoadBalancerPolicySpec{TargetRefs: []v1alpha1.LocalPolicyTargetReference{{Kind: "Service", Name: svc}}, TrafficPolicy: tp}}
	}
	lookup := Index([]*v1alpha1.LoadBalancerPolicy{
		at("shop", "new", t0.Add(time.Hour), "web", v1alpha1.TrafficPolicy{SlowStartSeconds: ptr.To[int32](2), DrainSeconds: ptr.To[int32](9)}),
		at("shop", "old", t0, "web", v1alpha1.TrafficPolicy{SlowStartSeconds: ptr.To[int32](1)}),
		at("shop", "bad", t0, "web", v1alpha1.TrafficPolicy{HealthCheck: httpCheck("no-slash")}),
		at("blog", "other", t0, "web", v1alpha1.TrafficPolicy{MaxConnectionsPerMember: ptr.To[int32](3)}),
	})
	want := &v1alpha1.TrafficPolicy{SlowStartSeconds: ptr.To[int32](1), DrainSeconds: ptr.To[int32](9)}
	if diff := cmp.Diff(want, lookup(ServiceTarget("shop", "web"))); diff != "" {
		t.Errorf("shop/web (-want +got):\n%s", diff)
	}
	if got := lookup(ServiceTarget("shop", "api")); got != nil {
		t.Errorf("shop/api: %+v, want none", got)
	}
}

// TestSpeaksFor_eachTargetHasOneInstallation: an installation writes the
// entries of the targets it serves or nobody claims, never those of a
// Service another installation claimed or of a Gateway of a GatewayClass it
// does not serve: two installations writing one entry overwrote each
// other's for ever (Accepted against TargetNotFound).
func TestSpeaksFor_eachTargetHasOneInstallation(t *testing.T) {
	svc := func(owner string) *corev1.Service {
		s := &corev1.Service{}
		if owner != "" {
			s.Annotations = map[string]string{contract.ClaimedByKey: owner}
		}
		return s
	}
	for _, c := range []struct {
		name             string
		target           Target
		service          *corev1.Service
		gatewayOfAnother bool
		want             bool
	}{
		{"a Service of ours", Target{Kind: v1alpha1.KindService}, svc("c1"), false, true},
		{"an unclaimed Service", Target{Kind: v1alpha1.KindService}, svc(""), false, true},
		{"a missing Service", Target{Kind: v1alpha1.KindService}, nil, false, true},
		{"a Service another installation claimed", Target{Kind: v1alpha1.KindService}, svc("c2"), false, false},
		{"a Gateway of ours, or missing", Target{Kind: v1alpha1.KindGateway}, nil, false, true},
		{"a Gateway of another installation's class", Target{Kind: v1alpha1.KindGateway}, nil, true, false},
	} {
		if got := SpeaksFor(c.target, c.service, c.gatewayOfAnother, "c1"); got != c.want {
			t.Errorf("%s: SpeaksFor = %t, want %t", c.name, got, c.want)
		}
	}
}
