package gateway

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

func withRule(f func(*gatewayv1.HTTPRouteRule)) routeMod {
	return func(r *gatewayv1.HTTPRoute) { f(&r.Spec.Rules[len(r.Spec.Rules)-1]) }
}

// TestRulePolicies: an HTTPRoute rule's timeouts, retry and
// sessionPersistence, and a GRPCRoute rule's sessionPersistence, are the
// policy of the rule's pool; a rule without them has none, and none of
// them is reported ignored any more.
func TestRulePolicies(t *testing.T) {
	dur := func(s string) *gatewayv1.Duration { return ptr(gatewayv1.Duration(s)) }
	rt := route("r", 1,
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/a")}, svcRef("a", 1)),
		withRule(func(r *gatewayv1.HTTPRouteRule) {
			r.Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: dur("10s"), BackendRequest: dur("500ms")}
			r.Retry = &gatewayv1.HTTPRouteRetry{Codes: []gatewayv1.HTTPRouteRetryStatusCode{503, 500}, Attempts: ptr(3), Backoff: dur("100ms")}
			r.SessionPersistence = &gatewayv1.SessionPersistence{SessionName: ptr("shop"), AbsoluteTimeout: dur("1h0m0.5s"),
				CookieConfig: &gatewayv1.CookieConfig{LifetimeType: ptr(gatewayv1.PermanentCookieLifetimeType)}}
		}),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/b")}, svcRef("a", 1)),
		withRule(func(r *gatewayv1.HTTPRouteRule) {
			r.SessionPersistence = &gatewayv1.SessionPersistence{Type: ptr(gatewayv1.HeaderBasedSessionPersistence)}
			r.Retry = &gatewayv1.HTTPRouteRetry{Attempts: ptr(20)}
			r.Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: dur("0s")}
		}),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/c")}, svcRef("a", 1)),
	)
	g := grpcRoute("g", 2, gatewayv1.GRPCRouteRule{BackendRefs: []gatewayv1.GRPCBackendRef{grpcRef("a", 1)},
		SessionPersistence: &gatewayv1.SessionPersistence{AbsoluteTimeout: dur("30m")}})
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{rt},
		GRPCRoutes: []*gatewayv1.GRPCRoute{g}, Services: []*corev1.Service{service(appNS, "a")},
		Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000)}})
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	want := map[string]*lbmodel.Policy{
		poolName("r", 0): {
			Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "shop", TimeoutSeconds: 3601, Permanent: true},
			Timeouts:    &lbmodel.Timeouts{RequestMillis: 10000, BackendRequestMillis: 500},
			Retry:       &lbmodel.Retry{Attempts: 3, Codes: []int32{500, 503}, BackoffMillis: 100},
		},
		poolName("r", 1): {
			Persistence: &lbmodel.Persistence{Type: lbmodel.PersistHeader, Name: "x-npl-session"},
			Retry:       &lbmodel.Retry{Attempts: 10},
		},
		poolName("r", 2):     nil,
		grpcPoolName("g", 0): {Persistence: &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "npl-session", TimeoutSeconds: 1800}},
	}
	n, err := lbmodel.Normalize(res.LB)
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		i := slices.IndexFunc(n.Pools, func(p lbmodel.Pool) bool { return p.Name == name })
		if i < 0 {
			t.Fatalf("no pool %s in %+v", name, n.Pools)
		}
		if diff := cmp.Diff(w, n.Pools[i].Policy); diff != "" {
			t.Errorf("policy of %s (-want +got):\n%s", name, diff)
		}
	}
	if got := strings.Join(res.Report.Warnings, "; "); strings.Contains(got, "ignored") || !strings.Contains(got, "retry.attempts 20: at most 10 retries") {
		t.Errorf("warnings %q: want the cap of the attempts, nothing ignored", got)
	}
}

// TestRulePolicies_aDurationNotParsedRefusesTheRoute: a duration the API
// server let through but that is none (a CRD without validation) leaves
// the route out, Accepted False with UnsupportedValue.
func TestRulePolicies_aDurationNotParsedRefusesTheRoute(t *testing.T) {
	rt := route("r", 1, rule([]gatewayv1.HTTPRouteMatch{prefixM("/a")}, svcRef("a", 1)),
		withRule(func(r *gatewayv1.HTTPRouteRule) {
			r.Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: ptr(gatewayv1.Duration("soon"))}
		}))
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{rt},
		Services: []*corev1.Service{service(appNS, "a")}})
	if len(res.Routes) != 1 || len(res.Routes[0].Parents) != 1 {
		t.Fatalf("route results %+v", res.Routes)
	}
	c := cond(res.Routes[0].Parents[0].Conditions, string(gatewayv1.RouteConditionAccepted))
	if c.Status != metav1.ConditionFalse || c.Reason != string(gatewayv1.RouteReasonUnsupportedValue) || !strings.Contains(c.Message, `timeouts.request: "soon" is not a duration`) {
		t.Errorf("Accepted %+v, want False UnsupportedValue naming the duration", c)
	}
	if res.LB != nil && len(res.LB.HTTP.Rules) != 0 {
		t.Errorf("the refused route's rules are in the model: %+v", res.LB.HTTP.Rules)
	}
}
