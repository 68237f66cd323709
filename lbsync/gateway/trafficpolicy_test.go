package gateway

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// xbtp is an XBackendTrafficPolicy of appNS targeting the
// Services svcs with sp.
func xbtp(name string, created int64, sp *gatewayv1.SessionPersistence, svcs ...string) *gatewayxv1a1.XBackendTrafficPolicy {
	p := &gatewayxv1a1.XBackendTrafficPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: name, Generation: 3,
		CreationTimestamp: metav1.Unix(created, 0)}}
	for _, s := range svcs {
		p.Spec.TargetRefs = append(p.Spec.TargetRefs, gatewayv1.LocalPolicyTargetReference{Kind: KindService, Name: gatewayv1.ObjectName(s)})
	}
	p.Spec.SessionPersistence = sp
	return p
}

// trafficResult is the status of a policy in res, failing when it has
// none.
func trafficResult(t *testing.T, res Result, name string) PolicyResult {
	t.Helper()
	i := slices.IndexFunc(res.TrafficPolicies, func(r PolicyResult) bool { return r.Name == name })
	if i < 0 {
		t.Fatalf("no status for XBackendTrafficPolicy %s in %+v", name, res.TrafficPolicies)
	}
	return res.TrafficPolicies[i]
}

// TestXBackendTrafficPolicy_rulePools: the sessionPersistence of the
// oldest policy that targets a backend Service is the persistence of the
// pools of the rules that send to it, converted as a rule's own; a rule's
// own sessionPersistence wins over it. The oldest policy of a Service is
// Accepted for the Gateway, a younger one Conflicted, one with an invalid
// duration Invalid (its Service served without persistence), and one that
// targets no backend of the Gateway gets no status. retryConstraint,
// which the model lacks, and a persistence the provider cannot express are
// named in the Accepted message and in a warning.
func TestXBackendTrafficPolicy_rulePools(t *testing.T) {
	header := gatewayv1.HeaderBasedSessionPersistence
	cookie := &gatewayv1.SessionPersistence{SessionName: ptr("a-session"), AbsoluteTimeout: ptr(gatewayv1.Duration("90s"))}
	bad := &gatewayv1.SessionPersistence{AbsoluteTimeout: ptr(gatewayv1.Duration("soon"))}
	retry := xbtp("retry", 1, &gatewayv1.SessionPersistence{Type: &header}, "b")
	retry.Spec.RetryConstraint = &gatewayxv1a1.RetryConstraint{Budget: &gatewayxv1a1.BudgetDetails{Percent: ptr(20)}}
	policies := []*gatewayxv1a1.XBackendTrafficPolicy{
		xbtp("a", 1, cookie, "a"),
		xbtp("a-younger", 2, &gatewayv1.SessionPersistence{SessionName: ptr("other")}, "a"),
		retry,
		xbtp("bad", 1, bad, "c"),
		xbtp("elsewhere", 1, cookie, "e"),
	}
	rt := route("r", 1,
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/a")}, svcRef("a", 1)),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/b")}, svcRef("b", 1)),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/own")}, svcRef("a", 1)),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/c")}, svcRef("c", 1)),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/d")}, svcRef("d", 1)))
	rt.Spec.Rules[2].SessionPersistence = &gatewayv1.SessionPersistence{SessionName: ptr("own")}
	caps := &lbmodel.PolicyCapabilities{Provider: "test", HTTP: lbmodel.PolicySupport{Persistence: []lbmodel.PersistenceType{lbmodel.PersistCookie}}}
	var svcs []*corev1.Service
	var pods []*corev1.Pod
	for i, s := range []string{"a", "b", "c", "d", "e"} {
		svcs = append(svcs, service(appNS, s))
		pods = append(pods, pod(appNS, s, s+"-1", "198.18.0.1", 61000+i))
	}
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{rt},
		Services: svcs, Pods: pods, TrafficPolicies: policies, PolicyCapabilities: caps})
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	want := map[string]*lbmodel.Policy{
		poolName("r", 0): {Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "a-session", TimeoutSeconds: 90}},
		poolName("r", 1): {Persistence: &lbmodel.Persistence{Type: lbmodel.PersistHeader, Name: defaultHeaderName}},
		poolName("r", 2): {Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "own"}},
		poolName("r", 3): nil,
		poolName("r", 4): nil,
	}
	for name, w := range want {
		if diff := cmp.Diff(w, poolPolicy(t, res.LB, name)); diff != "" {
			t.Errorf("policy of %s (-want +got):\n%s", name, diff)
		}
	}
	accepted := string(gatewayv1.PolicyConditionAccepted)
	for name, reason := range map[string]gatewayv1.PolicyConditionReason{
		"a": gatewayv1.PolicyReasonAccepted, "retry": gatewayv1.PolicyReasonAccepted,
		"a-younger": gatewayv1.PolicyReasonConflicted, "bad": gatewayv1.PolicyReasonInvalid,
	} {
		r := trafficResult(t, res, name)
		c := cond(r.Conditions, accepted)
		if c.Reason != string(reason) || (c.Status == metav1.ConditionTrue) != (reason == gatewayv1.PolicyReasonAccepted) || c.ObservedGeneration != 3 {
			t.Errorf("%s: Accepted %+v, want reason %s", name, c, reason)
		}
	}
	if m := cond(trafficResult(t, res, "retry").Conditions, accepted).Message; !strings.Contains(m, "retryConstraint") || !strings.Contains(m, "persistence.type=Header") {
		t.Errorf("retry: Accepted message %q names neither retryConstraint nor the header persistence", m)
	}
	if !slices.ContainsFunc(res.Report.Warnings, func(w string) bool { return strings.Contains(w, "XBackendTrafficPolicy "+appNS+"/retry") }) {
		t.Errorf("no warning for the policy retry: %v", res.Report.Warnings)
	}
	if slices.ContainsFunc(res.TrafficPolicies, func(r PolicyResult) bool { return r.Name == "elsewhere" }) {
		t.Errorf("a policy of no backend of the Gateway got a status: %+v", res.TrafficPolicies)
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Fatalf("the model breaks the rules: %v", err)
	}
}

// TestXBackendTrafficPolicy_disagree: a rule whose backends' policies ask
// for different persistence, and that has none of its own, makes its
// route not accepted (as backends that differ in BackendTLSPolicy); with
// its own sessionPersistence the rule is served with it.
func TestXBackendTrafficPolicy_disagree(t *testing.T) {
	policies := []*gatewayxv1a1.XBackendTrafficPolicy{
		xbtp("a", 1, &gatewayv1.SessionPersistence{SessionName: ptr("a")}, "a"),
		xbtp("b", 1, &gatewayv1.SessionPersistence{SessionName: ptr("b")}, "b"),
	}
	in := func(rt *gatewayv1.HTTPRoute) Input {
		return Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{rt},
			Services:        []*corev1.Service{service(appNS, "a"), service(appNS, "b")},
			Pods:            []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), pod(appNS, "b", "b-1", "198.18.0.1", 61001)},
			TrafficPolicies: policies}
	}
	rt := route("r", 1, rule([]gatewayv1.HTTPRouteMatch{prefixM("/")}, svcRef("a", 1), svcRef("b", 1)))
	res := Build(in(rt))
	if c := parentCond(t, res, KindHTTPRoute, "r", string(gatewayv1.RouteConditionAccepted)); c.Status != metav1.ConditionFalse ||
		c.Reason != string(gatewayv1.RouteReasonUnsupportedValue) || !strings.Contains(c.Message, "session persistence") {
		t.Errorf("route with disagreeing backends: Accepted %+v", c)
	}
	rt.Spec.Rules[0].SessionPersistence = &gatewayv1.SessionPersistence{SessionName: ptr("own")}
	res = Build(in(rt))
	if c := parentCond(t, res, KindHTTPRoute, "r", string(gatewayv1.RouteConditionAccepted)); c.Status != metav1.ConditionTrue {
		t.Fatalf("route with its own sessionPersistence: Accepted %+v", c)
	}
	want := &lbmodel.Policy{Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "own"}}
	if diff := cmp.Diff(want, poolPolicy(t, res.LB, poolName("r", 0))); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
}
