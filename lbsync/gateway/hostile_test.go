package gateway

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// What a tenant's route can do to the Gateway it shares with others: it is
// checked alone before it joins the model, so that a refusal stops only
// itself.

func regexM(p string) gatewayv1.HTTPRouteMatch {
	return gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchRegularExpression), Value: ptr(p)}}
}

// TestBuild_hostileRegexStopsOnlyItsRoute: a route whose regular
// expression RE2 accepts but the data plane runs otherwise (PCRE2 refuses
// \Q and \x{100}; (a|aa)+ backtracks exponentially) is not accepted, and
// the route beside it is served.
func TestBuild_hostileRegexStopsOnlyItsRoute(t *testing.T) {
	for _, expr := range []string{`/x\Qfoo`, `/\x{100}`, `/(a|aa)+`, strings.Repeat("(", 260) + "/a" + strings.Repeat(")", 260)} {
		t.Run(expr[:min(len(expr), 12)], func(t *testing.T) {
			web := route("web", 100, rule([]gatewayv1.HTTPRouteMatch{prefixM("/web")}, svcRef("a", 1)))
			evil := route("evil", 200, rule([]gatewayv1.HTTPRouteMatch{regexM(expr)}, svcRef("a", 1)))
			evil.Namespace = "evil"
			res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")),
				Routes:   []*gatewayv1.HTTPRoute{web, evil},
				Services: []*corev1.Service{service(appNS, "a"), service("evil", "a")},
				Pods:     []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), pod("evil", "a", "a-1", "198.18.0.1", 61001)}})
			if res.LB == nil {
				t.Fatalf("no model: %v", res.Report.Errors)
			}
			if _, err := lbmodel.Normalize(res.LB); err != nil {
				t.Fatalf("the model does not pass Normalize: %v", err)
			}
			if c := parentCond(t, res, KindHTTPRoute, "web", "Accepted"); c.Status != metav1.ConditionTrue {
				t.Errorf("web: Accepted %+v, want True", c)
			}
			if c := parentCond(t, res, KindHTTPRoute, "evil", "Accepted"); c.Status != metav1.ConditionFalse ||
				c.Reason != string(gatewayv1.RouteReasonUnsupportedValue) {
				t.Errorf("evil: Accepted %+v, want False UnsupportedValue", c)
			}
			for _, r := range res.LB.HTTP.Rules {
				if r.PathType == lbmodel.PathRegex {
					t.Errorf("the refused route's rule %s is in the model", r.Path)
				}
			}
		})
	}
}
