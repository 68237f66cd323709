package gateway

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// btlsPolicy is a BackendTLSPolicy of appNS targeting Service svc (its
// port section, or the whole Service when ""), verifying hostname with the
// CA certificates of the ConfigMaps cms.
func btlsPolicy(name string, created int64, svc, section, hostname string, cms ...string) *gatewayv1.BackendTLSPolicy {
	p := &gatewayv1.BackendTLSPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: name, Generation: 4,
		CreationTimestamp: metav1.Unix(created, 0)}}
	t := gatewayv1.LocalPolicyTargetReferenceWithSectionName{LocalPolicyTargetReference: gatewayv1.LocalPolicyTargetReference{
		Kind: KindService, Name: gatewayv1.ObjectName(svc)}}
	if section != "" {
		t.SectionName = ptr(gatewayv1.SectionName(section))
	}
	p.Spec.TargetRefs = []gatewayv1.LocalPolicyTargetReferenceWithSectionName{t}
	p.Spec.Validation.Hostname = gatewayv1.PreciseHostname(hostname)
	for _, c := range cms {
		p.Spec.Validation.CACertificateRefs = append(p.Spec.Validation.CACertificateRefs,
			gatewayv1.LocalObjectReference{Kind: KindConfigMap, Name: gatewayv1.ObjectName(c)})
	}
	return p
}

func caConfigMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: name}, Data: data}
}

// policyResult is the status of a policy in res, failing when it has none.
func policyResult(t *testing.T, res Result, name string) PolicyResult {
	t.Helper()
	i := slices.IndexFunc(res.BackendTLSPolicies, func(r PolicyResult) bool { return r.Name == name })
	if i < 0 {
		t.Fatalf("no status for BackendTLSPolicy %s in %+v", name, res.BackendTLSPolicies)
	}
	return res.BackendTLSPolicies[i]
}

// hasCond reports whether cs holds a condition of that type, status and
// reason.
func hasCond(cs []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) bool {
	c := cond(cs, typ)
	return c.Status == status && c.Reason == reason
}

func poolPolicy(t *testing.T, lb *lbmodel.LoadBalancer, name string) *lbmodel.Policy {
	t.Helper()
	i := slices.IndexFunc(lb.Pools, func(p lbmodel.Pool) bool { return p.Name == name })
	if i < 0 {
		t.Fatalf("no pool %s", name)
	}
	return lb.Pools[i].Policy
}

// TestBackendTLSPolicy_rulePools: the policy of each backend Service port
// is the BackendTLS of the pools of the rules that send to it: the oldest
// policy that names the port, else the oldest that names the Service; the
// CA certificates are the valid PEM certificates of the ConfigMaps' ca.crt,
// or the system's. Each policy that targets a backend of the Gateway gets
// a status for it: Accepted, Conflicted for a younger one naming the same,
// TargetNotFound for a port the Service lacks; one that targets nothing
// of the Gateway gets none.
func TestBackendTLSPolicy_rulePools(t *testing.T) {
	ca := newCert(t, "ca.example.com")
	junk := "# the bundle\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
	system := btlsPolicy("system", 5, "b", "", "b.example.com")
	system.Spec.Validation.WellKnownCACertificates = ptr(gatewayv1.WellKnownCACertificatesSystem)
	system.Spec.Validation.SubjectAltNames = []gatewayv1.SubjectAltName{{Type: gatewayv1.HostnameSubjectAltNameType, Hostname: "B.example.com"}}
	policies := []*gatewayv1.BackendTLSPolicy{
		btlsPolicy("whole", 1, "a", "", "whole.example.com", "ca"),
		btlsPolicy("port", 2, "a", "http", "Port.Example.com", "ca"),
		btlsPolicy("port-younger", 2, "a", "http", "younger.example.com", "ca"),
		btlsPolicy("no-port", 3, "a", "metrics", "a.example.com", "ca"),
		system,
		btlsPolicy("elsewhere", 1, "c", "", "c.example.com", "ca"),
	}
	rt := route("r", 1,
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/a")}, svcRef("a", 1)),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/b")}, svcRef("b", 1)),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/d")}, svcRef("d", 1)))
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{rt},
		Services: []*corev1.Service{service(appNS, "a"), service(appNS, "b"), service(appNS, "c"), service(appNS, "d")},
		Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), pod(appNS, "b", "b-1", "198.18.0.1", 61001),
			pod(appNS, "d", "d-1", "198.18.0.1", 61002)},
		BackendTLSPolicies: policies, ConfigMaps: []*corev1.ConfigMap{caConfigMap("ca", map[string]string{CACertKey: junk + string(ca.certPEM)})}})
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	want := map[string]*lbmodel.Policy{
		poolName("r", 0): {BackendTLS: &lbmodel.BackendTLS{Hostname: "port.example.com", CACertPEM: string(ca.certPEM)}},
		poolName("r", 1): {BackendTLS: &lbmodel.BackendTLS{Hostname: "b.example.com", SystemCAs: true,
			SubjectAltNames: []lbmodel.SubjectAltName{{Type: lbmodel.SANHostname, Value: "b.example.com"}}}},
		poolName("r", 2): nil,
	}
	for name, w := range want {
		if diff := cmp.Diff(w, poolPolicy(t, res.LB, name)); diff != "" {
			t.Errorf("policy of %s (-want +got):\n%s", name, diff)
		}
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Fatalf("the model breaks the rules: %v", err)
	}
	accepted, resolved := string(gatewayv1.PolicyConditionAccepted), string(gatewayv1.BackendTLSPolicyConditionResolvedRefs)
	for name, reason := range map[string]gatewayv1.PolicyConditionReason{
		"whole": gatewayv1.PolicyReasonAccepted, "port": gatewayv1.PolicyReasonAccepted, "system": gatewayv1.PolicyReasonAccepted,
		"port-younger": gatewayv1.PolicyReasonConflicted, "no-port": gatewayv1.PolicyReasonTargetNotFound,
	} {
		r := policyResult(t, res, name)
		status := metav1.ConditionFalse
		if reason == gatewayv1.PolicyReasonAccepted {
			status = metav1.ConditionTrue
		}
		if !hasCond(r.Conditions, accepted, status, string(reason)) ||
			!hasCond(r.Conditions, resolved, metav1.ConditionTrue, string(gatewayv1.BackendTLSPolicyReasonResolvedRefs)) {
			t.Errorf("%s: conditions %+v, want Accepted %s %s and ResolvedRefs True", name, r.Conditions, status, reason)
		}
		for _, c := range r.Conditions {
			if c.ObservedGeneration != 4 {
				t.Errorf("%s: %s observedGeneration %d, want 4", name, c.Type, c.ObservedGeneration)
			}
		}
	}
	if slices.ContainsFunc(res.BackendTLSPolicies, func(r PolicyResult) bool { return r.Name == "elsewhere" }) {
		t.Errorf("a policy of a Service the Gateway does not send to has a status for it: %+v", res.BackendTLSPolicies)
	}
}

// TestBackendTLSPolicy_notAccepted: a policy without a valid CA
// certificate, or that asks what npl-lbsync or the provider cannot do, is
// not accepted, with the spec's reasons, and its backend's share is
// answered 500 (here the rule's only backend: the rule answers 500); a
// policy with a valid CA certificate among invalid references is
// accepted, its ResolvedRefs False.
func TestBackendTLSPolicy_notAccepted(t *testing.T) {
	ca := newCert(t, "ca.example.com")
	valid := caConfigMap("ca", map[string]string{CACertKey: string(ca.certPEM)})
	haproxy := &lbmodel.PolicyCapabilities{Provider: "haproxy", HTTP: lbmodel.PolicySupport{BackendTLS: true}}
	uri := []gatewayv1.SubjectAltName{{Type: gatewayv1.URISubjectAltNameType, URI: "spiffe://a.example.com/web"}}
	tests := []struct {
		name       string
		mod        func(*gatewayv1.BackendTLSPolicy)
		configMaps []*corev1.ConfigMap
		forbidden  []string
		caps       *lbmodel.PolicyCapabilities
		accepted   gatewayv1.PolicyConditionReason // "" : True
		resolved   gatewayv1.PolicyConditionReason // "" : True
		message    string
	}{
		{name: "a reference of another kind", mod: func(p *gatewayv1.BackendTLSPolicy) {
			p.Spec.Validation.CACertificateRefs = []gatewayv1.LocalObjectReference{{Group: "invalid.io", Kind: "InvalidKind", Name: "ca"}}
		}, configMaps: []*corev1.ConfigMap{valid}, accepted: gatewayv1.BackendTLSPolicyReasonNoValidCACertificate,
			resolved: gatewayv1.BackendTLSPolicyReasonInvalidKind, message: "kind invalid.io/InvalidKind of ca is not a ConfigMap"},
		{name: "no such ConfigMap", accepted: gatewayv1.BackendTLSPolicyReasonNoValidCACertificate,
			resolved: gatewayv1.BackendTLSPolicyReasonInvalidCACertificateRef, message: "ConfigMap shop/ca not found"},
		{name: "no ca.crt", configMaps: []*corev1.ConfigMap{caConfigMap("ca", map[string]string{"tls.crt": string(ca.certPEM)})},
			accepted: gatewayv1.BackendTLSPolicyReasonNoValidCACertificate, resolved: gatewayv1.BackendTLSPolicyReasonInvalidCACertificateRef,
			message: "ConfigMap shop/ca has no key ca.crt"},
		{name: "an empty ca.crt", configMaps: []*corev1.ConfigMap{caConfigMap("ca", map[string]string{CACertKey: ""})},
			accepted: gatewayv1.BackendTLSPolicyReasonNoValidCACertificate, resolved: gatewayv1.BackendTLSPolicyReasonInvalidCACertificateRef,
			message: "holds no valid PEM certificate"},
		{name: "a ca.crt that does not parse", configMaps: []*corev1.ConfigMap{caConfigMap("ca", map[string]string{
			CACertKey: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"})},
			accepted: gatewayv1.BackendTLSPolicyReasonNoValidCACertificate, resolved: gatewayv1.BackendTLSPolicyReasonInvalidCACertificateRef,
			message: "holds no valid PEM certificate"},
		{name: "a ConfigMap npl-lbsync may not read", configMaps: []*corev1.ConfigMap{valid}, forbidden: []string{"shop/ca"},
			accepted: gatewayv1.BackendTLSPolicyReasonNoValidCACertificate, resolved: gatewayv1.BackendTLSPolicyReasonInvalidCACertificateRef,
			message: "npl-lbsync may not read ConfigMap shop/ca"},
		{name: "well-known CA certificates other than System", mod: func(p *gatewayv1.BackendTLSPolicy) {
			p.Spec.Validation.CACertificateRefs = nil
			p.Spec.Validation.WellKnownCACertificates = ptr(gatewayv1.WellKnownCACertificatesType("example.com/corp"))
		}, accepted: gatewayv1.PolicyReasonInvalid, message: `wellKnownCACertificates "example.com/corp" is not supported`},
		{name: "a URI the provider cannot verify", mod: func(p *gatewayv1.BackendTLSPolicy) { p.Spec.Validation.SubjectAltNames = uri },
			configMaps: []*corev1.ConfigMap{valid}, caps: haproxy, accepted: gatewayv1.PolicyReasonInvalid,
			message: "the haproxy provider cannot verify it: backendTLS.subjectAltNames type=URI not supported"},
		{name: "a URI a provider verifies", mod: func(p *gatewayv1.BackendTLSPolicy) { p.Spec.Validation.SubjectAltNames = uri },
			configMaps: []*corev1.ConfigMap{valid}},
		{name: "a valid CA certificate among invalid references", mod: func(p *gatewayv1.BackendTLSPolicy) {
			p.Spec.Validation.CACertificateRefs = append(p.Spec.Validation.CACertificateRefs,
				gatewayv1.LocalObjectReference{Kind: KindConfigMap, Name: "gone"})
		}, configMaps: []*corev1.ConfigMap{valid}, resolved: gatewayv1.BackendTLSPolicyReasonInvalidCACertificateRef,
			message: "caCertificateRefs[1]: ConfigMap shop/gone not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := btlsPolicy("p", 1, "a", "", "a.example.com", "ca")
			if tt.mod != nil {
				tt.mod(p)
			}
			rt := route("r", 1, rule([]gatewayv1.HTTPRouteMatch{prefixM("/a")}, svcRef("a", 1)))
			res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{rt},
				Services: []*corev1.Service{service(appNS, "a")}, Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000)},
				BackendTLSPolicies: []*gatewayv1.BackendTLSPolicy{p}, ConfigMaps: tt.configMaps, ForbiddenConfigMaps: tt.forbidden,
				PolicyCapabilities: tt.caps})
			if res.LB == nil {
				t.Fatalf("no model: %v", res.Report.Errors)
			}
			r := policyResult(t, res, "p")
			acc, rr := cond(r.Conditions, string(gatewayv1.PolicyConditionAccepted)), cond(r.Conditions, string(gatewayv1.BackendTLSPolicyConditionResolvedRefs))
			wantAcc, wantRR := cmpReason(tt.accepted, gatewayv1.PolicyReasonAccepted), cmpReason(tt.resolved, gatewayv1.BackendTLSPolicyReasonResolvedRefs)
			if acc.Status != wantAcc.status || acc.Reason != wantAcc.reason || rr.Status != wantRR.status || rr.Reason != wantRR.reason {
				t.Errorf("Accepted %s %s, ResolvedRefs %s %s; want %s %s, %s %s", acc.Status, acc.Reason, rr.Status, rr.Reason,
					wantAcc.status, wantAcc.reason, wantRR.status, wantRR.reason)
			}
			if !strings.Contains(acc.Message+" | "+rr.Message, tt.message) {
				t.Errorf("messages %q | %q lack %q", acc.Message, rr.Message, tt.message)
			}
			i := slices.IndexFunc(res.LB.HTTP.Rules, func(r lbmodel.Rule) bool { return r.Path == "/a" })
			if i < 0 {
				t.Fatalf("no rule /a in %+v", res.LB.HTTP.Rules)
			}
			served := res.LB.HTTP.Rules[i]
			if tt.accepted == "" {
				if served.Pool == "" || poolPolicy(t, res.LB, served.Pool).BackendTLS == nil {
					t.Errorf("rule %+v: want its pool with backend TLS", served)
				}
				return
			}
			if served.Pool != "" || served.FixedStatus != 500 {
				t.Errorf("rule %+v: want it answered 500", served)
			}
			if w := strings.Join(res.Report.Warnings, "; "); !strings.Contains(w, "BackendTLSPolicy shop/p is not accepted") {
				t.Errorf("warnings %q: want the backend left out, naming the policy", w)
			}
		})
	}
}

type condWant struct {
	status metav1.ConditionStatus
	reason string
}

// cmpReason is the condition a test case wants: False with reason, or
// True with ok when reason is "".
func cmpReason(reason, ok gatewayv1.PolicyConditionReason) condWant {
	if reason == "" {
		return condWant{metav1.ConditionTrue, string(ok)}
	}
	return condWant{metav1.ConditionFalse, string(reason)}
}

// TestBackendTLSPolicy_sharesOfRule: an invalid policy's backend beside a
// valid one takes its share of the rule's requests as 500s; backends
// asking for different TLS to their Pods refuse the route (one pool speaks
// one way), the same TLS from two policies does not.
func TestBackendTLSPolicy_sharesOfRule(t *testing.T) {
	ca := newCert(t, "ca.example.com")
	cms := []*corev1.ConfigMap{caConfigMap("ca", map[string]string{CACertKey: string(ca.certPEM)})}
	svcs := []*corev1.Service{service(appNS, "a"), service(appNS, "b"), service(appNS, "c")}
	pods := []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), pod(appNS, "b", "b-1", "198.18.0.1", 61001),
		pod(appNS, "c", "c-1", "198.18.0.1", 61002)}
	build := func(policies []*gatewayv1.BackendTLSPolicy, backends ...gatewayv1.HTTPBackendRef) Result {
		rt := route("r", 1, rule([]gatewayv1.HTTPRouteMatch{prefixM("/")}, backends...))
		return Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{rt},
			Services: svcs, Pods: pods, BackendTLSPolicies: policies, ConfigMaps: cms})
	}

	res := build([]*gatewayv1.BackendTLSPolicy{btlsPolicy("a", 1, "a", "", "a.example.com", "ca"),
		btlsPolicy("b", 1, "b", "", "a.example.com", "missing")}, svcRef("a", 1), svcRef("b", 1))
	if res.LB == nil || len(res.LB.Pools) != 1 {
		t.Fatalf("model %+v: %v", res.LB, res.Report.Errors)
	}
	p := res.LB.Pools[0]
	if p.InvalidWeight != 1 || len(p.Members) != 1 || p.Members[0].Port != 61000 || p.Policy == nil || p.Policy.BackendTLS == nil {
		t.Errorf("pool %+v: want a's member with TLS and b's share answered 500", p)
	}

	res = build([]*gatewayv1.BackendTLSPolicy{btlsPolicy("a", 1, "a", "", "a.example.com", "ca"),
		btlsPolicy("b", 2, "b", "", "a.example.com", "ca")}, svcRef("a", 1), svcRef("b", 1))
	if res.LB == nil || len(res.LB.Pools) != 1 || len(res.LB.Pools[0].Members) != 2 || res.LB.Pools[0].Policy.BackendTLS == nil {
		t.Errorf("two policies asking the same: model %+v, errors %v; want one pool with TLS to both", res.LB, res.Report.Errors)
	}

	res = build([]*gatewayv1.BackendTLSPolicy{btlsPolicy("a", 1, "a", "", "a.example.com", "ca")}, svcRef("a", 1), svcRef("c", 1))
	acc := parentCond(t, res, KindHTTPRoute, "r", string(gatewayv1.RouteConditionAccepted))
	if acc.Status != metav1.ConditionFalse || acc.Reason != string(gatewayv1.RouteReasonUnsupportedValue) ||
		!strings.Contains(acc.Message, "differ in TLS to their Pods") {
		t.Errorf("route Accepted %+v: want False UnsupportedValue naming the backends that differ", acc)
	}
	if res.LB != nil && len(res.LB.Pools) > 0 {
		t.Errorf("pools %+v: want the route left out", res.LB.Pools)
	}
}

// TestBackendTLSPolicy_otherRouteKinds: GRPCRoute backends, and those of
// TLSRoutes on Terminate listeners, with a policy are left out (npl-lbsync
// does not speak TLS to their Pods, and must not speak in clear); TCP
// routes and TLS passthrough start no TLS, and are served as before.
func TestBackendTLSPolicy_otherRouteKinds(t *testing.T) {
	ca := newCert(t, "ca.example.com")
	cert := newCert(t, "t.example.com")
	in := Input{ClusterName: testCluster,
		Gateway: gateway(httpL("http", 80, ""), streamL("tcp", gatewayv1.TCPProtocolType, 9000),
			tlsL("pass", 8443, "p.example.com", gatewayv1.TLSModePassthrough),
			tlsL("term", 9443, "t.example.com", gatewayv1.TLSModeTerminate, secretRef("", "cert"))),
		GRPCRoutes: []*gatewayv1.GRPCRoute{grpcRoute("g", 1, gatewayv1.GRPCRouteRule{BackendRefs: []gatewayv1.GRPCBackendRef{grpcRef("a", 1)}})},
		TCPRoutes:  []*gatewayv1.TCPRoute{tcpRoute("t", 1, "tcp", ref("a", 80, 1))},
		TLSRoutes: []*gatewayv1.TLSRoute{tlsRoute("pass", 1, "pass", nil, ref("a", 80, 1)),
			tlsRoute("term", 1, "term", nil, ref("a", 80, 1))},
		Services: []*corev1.Service{service(appNS, "a")}, Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000)},
		Secrets:            []*corev1.Secret{cert.secret(infraNS, "cert")},
		BackendTLSPolicies: []*gatewayv1.BackendTLSPolicy{btlsPolicy("p", 1, "a", "", "a.example.com", "ca")},
		ConfigMaps:         []*corev1.ConfigMap{caConfigMap("ca", map[string]string{CACertKey: string(ca.certPEM)})},
	}
	res := Build(in)
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	members := map[string]int{}
	for _, p := range res.LB.Pools {
		members[p.Name] = len(p.Members)
		if p.Policy != nil && p.Policy.BackendTLS != nil {
			t.Errorf("pool %s has backend TLS", p.Name)
		}
	}
	for _, l := range res.LB.Listeners {
		if l.Protocol == lbmodel.TCP {
			members[l.Pool.Name] = len(l.Pool.Members)
		}
	}
	want := map[string]int{
		lbmodel.PoolName(lbName, lbmodel.TCP, 9000):                          1,
		lbmodel.GatewayRoutePoolName(lbName, KindTLSRoute, appNS, "pass", 0): 1,
		lbmodel.GatewayRoutePoolName(lbName, KindTLSRoute, appNS, "term", 0): 0,
	}
	for name, n := range want {
		if got, ok := members[name]; !ok || got != n {
			t.Errorf("pool %s: %d members (present %v), want %d", name, got, ok, n)
		}
	}
	if _, ok := members[grpcPoolName("g", 0)]; ok {
		t.Errorf("the GRPCRoute rule has a pool: want it answered 500")
	}
	w := strings.Join(res.Report.Warnings, "; ")
	for _, s := range []string{"not serve for GRPCRoutes", "not serve for TLSRoutes on Terminate listeners"} {
		if !strings.Contains(w, s) {
			t.Errorf("warnings %q lack %q", w, s)
		}
	}
}

// TestPolicyAncestors: a Gateway's entry of npl-lbsync is added, replaced
// (lastTransitionTime kept when the status holds) and removed; the entries
// of other controllers and Gateways stay; a full list takes no new entry.
func TestPolicyAncestors(t *testing.T) {
	then, now := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	accepted := func(status metav1.ConditionStatus, at metav1.Time) []metav1.Condition {
		return []metav1.Condition{{Type: "Accepted", Status: status, Reason: "R", ObservedGeneration: 2, LastTransitionTime: at}}
	}
	entry := func(ctrl gatewayv1.GatewayController, name string, conds []metav1.Condition) gatewayv1.PolicyAncestorStatus {
		ns := gatewayv1.Namespace(infraNS)
		return gatewayv1.PolicyAncestorStatus{ControllerName: ctrl, Conditions: conds,
			AncestorRef: parentRefWithDefaults(gatewayv1.ParentReference{Namespace: &ns, Name: gatewayv1.ObjectName(name)})}
	}
	other := entry("example.com/other", "gw", accepted(metav1.ConditionTrue, then))
	mine := entry(ControllerName, "gw", accepted(metav1.ConditionTrue, then))
	neighbour := entry(ControllerName, "gw2", accepted(metav1.ConditionTrue, then))
	full := make([]gatewayv1.PolicyAncestorStatus, maxPolicyAncestors)
	for i := range full {
		full[i] = other
	}
	tests := []struct {
		name    string
		current []gatewayv1.PolicyAncestorStatus
		desired []metav1.Condition
		want    []gatewayv1.PolicyAncestorStatus
	}{
		{"added", []gatewayv1.PolicyAncestorStatus{other}, accepted(metav1.ConditionTrue, metav1.Time{}),
			[]gatewayv1.PolicyAncestorStatus{other, entry(ControllerName, "gw", accepted(metav1.ConditionTrue, now))}},
		{"unchanged keeps its time", []gatewayv1.PolicyAncestorStatus{mine, neighbour}, accepted(metav1.ConditionTrue, metav1.Time{}),
			[]gatewayv1.PolicyAncestorStatus{mine, neighbour}},
		{"changed", []gatewayv1.PolicyAncestorStatus{other, mine}, accepted(metav1.ConditionFalse, metav1.Time{}),
			[]gatewayv1.PolicyAncestorStatus{other, entry(ControllerName, "gw", accepted(metav1.ConditionFalse, now))}},
		{"removed", []gatewayv1.PolicyAncestorStatus{mine, other, neighbour}, nil, []gatewayv1.PolicyAncestorStatus{other, neighbour}},
		{"full", full, accepted(metav1.ConditionTrue, metav1.Time{}), full},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PolicyAncestors(tt.current, infraNS, "gw", tt.desired, now)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ancestors (-want +got):\n%s", diff)
			}
		})
	}
	p := &gatewayv1.BackendTLSPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: appNS},
		Status: gatewayv1.PolicyStatus{Ancestors: []gatewayv1.PolicyAncestorStatus{other, mine, neighbour, mine}}}
	if got := AncestorGateways(p.Namespace, p.Status.Ancestors); !slices.Equal(got, []string{infraNS + "/gw", infraNS + "/gw2"}) {
		t.Errorf("AncestorGateways = %v", got)
	}
}
