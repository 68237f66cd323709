package gateway

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers/mock"
)

func corsFilter(c gatewayv1.HTTPCORSFilter) gatewayv1.HTTPRouteFilter {
	return gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterCORS, CORS: &c}
}

// TestBuild_corsFilter: an HTTPRoute rule's CORS filter is its model
// rule's CORS, in canonical form, with Gateway API's default max age (5)
// when it sets none; a rule that answers 500 keeps it (a preflight is
// still answered).
func TestBuild_corsFilter(t *testing.T) {
	rt := route("r", 1,
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/cors")}, svcRef("a", 1)),
		withFilter(corsFilter(gatewayv1.HTTPCORSFilter{
			AllowOrigins:     []gatewayv1.CORSOrigin{"https://www.foo.com", "https://*.bar.com"},
			AllowCredentials: ptr(true), AllowMethods: []gatewayv1.HTTPMethodWithWildcard{"OPTIONS", "GET"},
			AllowHeaders: []gatewayv1.HTTPHeaderName{"x-header-2", "x-header-1"}, ExposeHeaders: []gatewayv1.HTTPHeaderName{"x-header-3"},
			MaxAge: 3600})),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/any")}, svcRef("nope", 1)),
		withFilter(corsFilter(gatewayv1.HTTPCORSFilter{AllowOrigins: []gatewayv1.CORSOrigin{"*"}, AllowMethods: []gatewayv1.HTTPMethodWithWildcard{"*"}})),
	)
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{rt},
		Services: []*corev1.Service{service(appNS, "a")}, Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000)}})
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	n, err := lbmodel.Normalize(res.LB)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*lbmodel.CORS{}
	for _, r := range n.HTTP.Rules {
		got[r.Path] = r.CORS
	}
	want := map[string]*lbmodel.CORS{
		"/cors": {AllowOrigins: []string{"https://*.bar.com", "https://www.foo.com"}, AllowCredentials: true, AllowMethods: []string{"GET", "OPTIONS"},
			AllowHeaders: []string{"x-header-1", "x-header-2"}, ExposeHeaders: []string{"x-header-3"}, MaxAgeSeconds: 3600},
		"/any": {AllowOrigins: []string{"*"}, AllowMethods: []string{"*"}, MaxAgeSeconds: 5},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CORS of the rules (-want +got):\n%s", diff)
	}
	if c := cond(res.Routes[0].Parents[0].Conditions, string(gatewayv1.RouteConditionAccepted)); c.Status != metav1.ConditionTrue {
		t.Errorf("route Accepted %+v, want True", c)
	}
}

// TestBuild_refusesCORSTheModelOrProviderCannotServe: a CORS filter with a
// value the model refuses (an origin the API server's pattern let through
// with a port beyond 65535), or on a provider that answers no preflight
// request (the mock), leaves its route out, not accepted, with the reason;
// its neighbour is served.
func TestBuild_refusesCORSTheModelOrProviderCannotServe(t *testing.T) {
	for name, tt := range map[string]struct {
		filter gatewayv1.HTTPCORSFilter
		mock   bool
		want   string
	}{
		"port 99999":    {filter: gatewayv1.HTTPCORSFilter{AllowOrigins: []gatewayv1.CORSOrigin{"https://a.example:99999"}}, want: "port 99999 is out of 1-65535"},
		"the provider":  {filter: gatewayv1.HTTPCORSFilter{AllowOrigins: []gatewayv1.CORSOrigin{"*"}}, mock: true, want: "cors (cross-origin requests"},
		"a bad max age": {filter: gatewayv1.HTTPCORSFilter{MaxAge: -1}, want: "maxAgeSeconds -1 is not positive"},
	} {
		t.Run(name, func(t *testing.T) {
			cors := route("cors", 1, rule([]gatewayv1.HTTPRouteMatch{prefixM("/cors")}, svcRef("a", 1)), withFilter(corsFilter(tt.filter)))
			web := route("web", 2, rule([]gatewayv1.HTTPRouteMatch{prefixM("/web")}, svcRef("a", 1)))
			in := Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{cors, web},
				Services: []*corev1.Service{service(appNS, "a")}}
			if tt.mock {
				in.Checker = &mock.Mock{}
			}
			res := Build(in)
			c := parentCond(t, res, KindHTTPRoute, "cors", string(gatewayv1.RouteConditionAccepted))
			if c.Status != metav1.ConditionFalse || c.Reason != string(gatewayv1.RouteReasonUnsupportedValue) || !strings.Contains(c.Message, tt.want) {
				t.Errorf("Accepted %+v, want False UnsupportedValue naming %q", c, tt.want)
			}
			if res.LB == nil || len(res.LB.HTTP.Rules) != 1 || res.LB.HTTP.Rules[0].Path != "/web" {
				t.Errorf("model %+v, want the neighbour's rule alone", res.LB)
			}
		})
	}
}
