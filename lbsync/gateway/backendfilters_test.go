package gateway

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
)

// withRefFilter gives backendRef ref of the last rule a filter of its own.
func withRefFilter(ref int, f gatewayv1.HTTPRouteFilter) routeMod {
	return func(r *gatewayv1.HTTPRoute) {
		last := &r.Spec.Rules[len(r.Spec.Rules)-1]
		last.BackendRefs[ref].Filters = append(last.BackendRefs[ref].Filters, f)
	}
}

func setHeader(name, value string) gatewayv1.HTTPRouteFilter {
	return gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier,
		RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: gatewayv1.HTTPHeaderName(name), Value: value}}}}
}

func refPoolName(route string, rule, ref int) string {
	return lbmodel.GatewayRouteBackendPoolName(lbName, KindHTTPRoute, appNS, route, rule, ref)
}

// TestBuild_splitsARuleWhoseBackendRefsHaveFilters: a rule whose
// backendRefs have request header filters of their own
// (HTTPRouteBackendRequestHeaderModification) splits its requests between
// a pool per valid backendRef, by weight, each with its filter; invalid
// backendRefs keep their share, answered 500; a backendRef without Pods
// or weight has none. A rule with one backendRef keeps one pool, its
// backendRef's filter the rule's.
func TestBuild_splitsARuleWhoseBackendRefsHaveFilters(t *testing.T) {
	rt := route("r", 1,
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/split")}, svcRef("a", 10), svcRef("nope", 1), svcRef("empty", 5), svcRef("b", 10), svcRef("a", 0)),
		withFilter(setHeader("X-Rule", "r")),
		withRefFilter(0, setHeader("Backend", "a")),
		withRefFilter(3, setHeader("Backend", "b")),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/one")}, svcRef("b", 1)),
		withRefFilter(0, setHeader("Backend", "b")),
	)
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{rt},
		Services: []*corev1.Service{service(appNS, "a"), service(appNS, "b"), service(appNS, "empty")},
		Pods:     []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), pod(appNS, "b", "b-1", "198.18.0.2", 61001)}})
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	set := func(name, value string) *lbmodel.HeaderFilter {
		return &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: name, Value: value}}}
	}
	want := []lbmodel.Rule{
		{Path: "/one", PathType: lbmodel.PathPrefix, Pool: poolName("r", 1), Ports: []int32{80}, Order: 1, RequestHeaders: set("Backend", "b")},
		{Path: "/split", PathType: lbmodel.PathPrefix, Ports: []int32{80}, RequestHeaders: set("X-Rule", "r"),
			Backends: []lbmodel.RuleBackend{
				{Pool: refPoolName("r", 0, 0), Weight: 10, RequestHeaders: set("Backend", "a")},
				{Weight: 1},
				{Pool: refPoolName("r", 0, 3), Weight: 10, RequestHeaders: set("Backend", "b")},
			}},
	}
	if diff := cmp.Diff(want, res.LB.HTTP.Rules, cmpopts.EquateEmpty(),
		cmpopts.SortSlices(func(a, b lbmodel.Rule) bool { return a.Path < b.Path })); diff != "" {
		t.Errorf("rules (-want +got):\n%s\nerrors %v", diff, res.Report.Errors)
	}
	wantPools := []lbmodel.Pool{
		{Name: poolName("r", 1), Members: []lbmodel.Member{up("198.18.0.2", 61001, 0)}},
		{Name: refPoolName("r", 0, 0), Members: []lbmodel.Member{up("198.18.0.1", 61000, 0)}},
		{Name: refPoolName("r", 0, 3), Members: []lbmodel.Member{up("198.18.0.2", 61001, 0)}},
	}
	if diff := cmp.Diff(wantPools, res.LB.Pools, cmpopts.EquateEmpty(),
		cmpopts.SortSlices(func(a, b lbmodel.Pool) bool { return a.Name < b.Name })); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
	if got := res.Report.PoolBackends[refPoolName("r", 0, 3)]; !cmp.Equal(got, []string{appNS + "/b"}) {
		t.Errorf("the backends of pool %s: %v, want Service b", refPoolName("r", 0, 3), got)
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Errorf("the model does not pass Normalize: %v", err)
	}
	if c := cond(res.Routes[0].Parents[0].Conditions, string(gatewayv1.RouteConditionAccepted)); c.Status != metav1.ConditionTrue {
		t.Errorf("route Accepted %+v, want True", c)
	}
}

// TestBuild_refusesWhatABackendRefAmongSeveralCannotDo: on one backendRef
// among several, only a request header filter is served (a load balancer
// answers or rewrites a request before it picks the backend), and no
// session persistence, which the pick per request would break: the route
// is not accepted.
func TestBuild_refusesWhatABackendRefAmongSeveralCannotDo(t *testing.T) {
	for name, mod := range map[string]routeMod{
		"filter ResponseHeaderModifier of one backendRef among several": withRefFilter(1, gatewayv1.HTTPRouteFilter{
			Type:                   gatewayv1.HTTPRouteFilterResponseHeaderModifier,
			ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{Remove: []string{"server"}}}),
		"filter RequestHeaderModifier given twice": withRefFilter(0, setHeader("B", "2")),
		"session persistence on a rule whose backendRefs have filters": func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].SessionPersistence = &gatewayv1.SessionPersistence{Type: ptr(gatewayv1.CookieBasedSessionPersistence)}
		},
	} {
		rt := route("r", 1, rule([]gatewayv1.HTTPRouteMatch{prefixM("/")}, svcRef("a", 1), svcRef("b", 1)),
			withRefFilter(0, setHeader("A", "1")), mod)
		res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{rt},
			Services: []*corev1.Service{service(appNS, "a"), service(appNS, "b")}})
		c := cond(res.Routes[0].Parents[0].Conditions, string(gatewayv1.RouteConditionAccepted))
		if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, name) {
			t.Errorf("%s: Accepted %+v, want False naming it", name, c)
		}
		if res.LB != nil && res.LB.HTTP != nil && len(res.LB.HTTP.Rules) != 0 {
			t.Errorf("%s: rules %+v, want none", name, res.LB.HTTP.Rules)
		}
	}
}
