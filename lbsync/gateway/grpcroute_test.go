package gateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nodeportlocal/npl/lbmodel"
	corev1 "k8s.io/api/core/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func grpcRoute(name string, created int64, rules ...gatewayv1.GRPCRouteRule) *gatewayv1.GRPCRoute {
	return &gatewayv1.GRPCRoute{ObjectMeta: routeMeta(name, created), Spec: gatewayv1.GRPCRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: toGateway("")}, Rules: rules}}
}

func grpcRef(name string, weight int32) gatewayv1.GRPCBackendRef {
	return gatewayv1.GRPCBackendRef{BackendRef: ref(name, 80, weight)}
}

func method(typ gatewayv1.GRPCMethodMatchType, service, meth string) gatewayv1.GRPCRouteMatch {
	m := &gatewayv1.GRPCMethodMatch{Type: ptr(typ)}
	if service != "" {
		m.Service = ptr(service)
	}
	if meth != "" {
		m.Method = ptr(meth)
	}
	return gatewayv1.GRPCRouteMatch{Method: m}
}

func grpcPoolName(route string, idx int) string {
	return lbmodel.GatewayRoutePoolName(lbName, KindGRPCRoute, appNS, route, idx)
}

// TestGRPCRoutes: GRPCRoute matches become HTTP rules on the paths of
// their methods, to h2c pools, next to HTTPRoute rules; a rule whose
// backendRefs are all invalid answers 500, one with some invalid answers
// their share 500.
func TestGRPCRoutes(t *testing.T) {
	exact := gatewayv1.GRPCMethodMatchExact
	re := gatewayv1.GRPCMethodMatchRegularExpression
	withHeaders := method(exact, "echo.Echo", "Ping")
	withHeaders.Headers = []gatewayv1.GRPCHeaderMatch{{Name: "X-Env", Value: "prod"},
		{Type: ptr(gatewayv1.GRPCHeaderMatchRegularExpression), Name: "x-env", Value: "ignored"}, {Name: "X-Other", Value: "1"}}
	rt := grpcRoute("g", 100,
		gatewayv1.GRPCRouteRule{Matches: []gatewayv1.GRPCRouteMatch{withHeaders, method(exact, "echo.Echo", "")},
			BackendRefs: []gatewayv1.GRPCBackendRef{grpcRef("a", 1)},
			Filters: []gatewayv1.GRPCRouteFilter{{Type: gatewayv1.GRPCRouteFilterResponseHeaderModifier,
				ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{Add: []gatewayv1.HTTPHeader{{Name: "X-Via", Value: "npl"}}}}}},
		gatewayv1.GRPCRouteRule{Matches: []gatewayv1.GRPCRouteMatch{method(exact, "", "Stream"), method(re, "echo\\..*", "")},
			BackendRefs: []gatewayv1.GRPCBackendRef{grpcRef("nope", 1)}},
		// One backendRef of two invalid: half the requests get 500.
		gatewayv1.GRPCRouteRule{BackendRefs: []gatewayv1.GRPCBackendRef{grpcRef("a", 1), grpcRef("nope", 1)}},
	)
	web := route("web", 50, rule([]gatewayv1.HTTPRouteMatch{prefixM("/static")}, svcRef("a", 1)))
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), GRPCRoutes: []*gatewayv1.GRPCRoute{rt},
		Routes: []*gatewayv1.HTTPRoute{web}, Services: []*corev1.Service{service(appNS, "a")},
		Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000)}})
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	members := []lbmodel.Member{up("198.18.0.1", 61000, 0)}
	wantPools := []lbmodel.Pool{
		{Name: grpcPoolName("g", 0), AppProtocol: lbmodel.AppProtocolH2C, Members: members},
		{Name: grpcPoolName("g", 2), AppProtocol: lbmodel.AppProtocolH2C, Members: members, InvalidWeight: 1},
		{Name: poolName("web", 0), Members: members},
	}
	if diff := cmp.Diff(wantPools, res.LB.Pools, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
	via := &lbmodel.HeaderFilter{Add: []lbmodel.Header{{Name: "X-Via", Value: "npl"}}}
	ports := []int32{80}
	want := []lbmodel.Rule{
		{Path: "/echo.Echo/Ping", PathType: lbmodel.PathExact, Pool: grpcPoolName("g", 0), Ports: ports, Order: 1, ResponseHeaders: via,
			Headers: []lbmodel.ValueMatch{{Name: "X-Env", Value: "prod"}, {Name: "X-Other", Value: "1"}}},
		{Path: "/echo.Echo", PathType: lbmodel.PathPrefix, Pool: grpcPoolName("g", 0), Ports: ports, Order: 1, ResponseHeaders: via},
		{Path: "/[^/]+/Stream", PathType: lbmodel.PathRegex, FixedStatus: 500, Ports: ports, Order: 2},
		{Path: "/(?:echo\\..*)/(?:[^/]+)", PathType: lbmodel.PathRegex, FixedStatus: 500, Ports: ports, Order: 2},
		{Path: "/", PathType: lbmodel.PathPrefix, Pool: grpcPoolName("g", 2), Ports: ports, Order: 3},
		{Path: "/static", PathType: lbmodel.PathPrefix, Pool: poolName("web", 0), Ports: ports, Order: 0},
	}
	if diff := cmp.Diff(want, res.LB.HTTP.Rules, cmpopts.EquateEmpty(),
		cmpopts.SortSlices(func(a, b lbmodel.Rule) bool { return a.Path < b.Path })); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Errorf("the model does not pass Normalize: %v", err)
	}
	if c := parentCond(t, res, KindGRPCRoute, "g", "ResolvedRefs"); c.Reason != "BackendNotFound" {
		t.Errorf("ResolvedRefs %s, want BackendNotFound", c.Reason)
	}
	if got := res.Listeners[0].Status.AttachedRoutes; got != 2 {
		t.Errorf("%d attached routes, want 2", got)
	}
}

// TestGRPCRouteStatus: what npl-lbsync cannot serve leaves the route not
// Accepted; GRPCRoutes attach to HTTP and HTTPS listeners only.
func TestGRPCRouteStatus(t *testing.T) {
	mirror := gatewayv1.GRPCRouteRule{BackendRefs: []gatewayv1.GRPCBackendRef{grpcRef("a", 1)},
		Filters: []gatewayv1.GRPCRouteFilter{{Type: gatewayv1.GRPCRouteFilterRequestMirror}}}
	badRegex := gatewayv1.GRPCRouteRule{Matches: []gatewayv1.GRPCRouteMatch{method(gatewayv1.GRPCMethodMatchRegularExpression, "(", "")},
		BackendRefs: []gatewayv1.GRPCBackendRef{grpcRef("a", 1)}}
	ok := gatewayv1.GRPCRouteRule{BackendRefs: []gatewayv1.GRPCBackendRef{grpcRef("a", 1)}}
	onTCP := grpcRoute("r", 1, ok)
	onTCP.Spec.ParentRefs = toGateway("tcp")
	tests := []struct {
		name     string
		route    *gatewayv1.GRPCRoute
		accepted string
	}{
		{"accepted", grpcRoute("r", 1, ok), "Accepted"},
		{"mirror", grpcRoute("r", 1, mirror), "UnsupportedValue"},
		{"bad regular expression", grpcRoute("r", 1, badRegex), "UnsupportedValue"},
		{"on a TCP listener", onTCP, "NotAllowedByListeners"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, ""), streamL("tcp", gatewayv1.TCPProtocolType, 9000)),
				GRPCRoutes: []*gatewayv1.GRPCRoute{tt.route}, Services: []*corev1.Service{service(appNS, "a")}})
			if c := parentCond(t, res, KindGRPCRoute, "r", "Accepted"); c.Reason != tt.accepted {
				t.Errorf("Accepted %s, want %s", c.Reason, tt.accepted)
			}
			if n := len(res.LB.HTTP.Rules); (n > 0) != (tt.accepted == "Accepted") {
				t.Errorf("%d rules", n)
			}
		})
	}
}

// TestHTTPRouteH2C: an HTTPRoute rule whose backends' Service ports all
// have appProtocol kubernetes.io/h2c gets an h2c pool.
func TestHTTPRouteH2C(t *testing.T) {
	h2c := service(appNS, "h")
	h2c.Spec.Ports[0].AppProtocol = ptr("kubernetes.io/h2c")
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Services: []*corev1.Service{h2c, service(appNS, "a")},
		Routes: []*gatewayv1.HTTPRoute{route("r", 1, rule(nil, svcRef("h", 1)), rule([]gatewayv1.HTTPRouteMatch{prefixM("/mixed")}, svcRef("h", 1), svcRef("a", 1)))}})
	got := map[string]string{}
	for _, p := range res.LB.Pools {
		got[p.Name] = p.AppProtocol
	}
	want := map[string]string{poolName("r", 0): lbmodel.AppProtocolH2C, poolName("r", 1): ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("app protocols (-want +got):\n%s", diff)
	}
}
