package gateway

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

// refusing is a provider's ModelChecker that cannot express query
// matches, h2c pools nor TLS listeners.
type refusing struct{}

func (refusing) CheckModel(lb *lbmodel.LoadBalancer) error {
	for _, l := range lb.Listeners {
		if l.Protocol == lbmodel.TLS {
			return fmt.Errorf("listener TLS/%d: a TLS listener is %w", l.Port, lbmodel.ErrUnsupported)
		}
	}
	for _, p := range lb.Pools {
		if p.AppProtocol != "" {
			return fmt.Errorf("pool %s: appProtocol %s is %w", p.Name, p.AppProtocol, lbmodel.ErrUnsupported)
		}
	}
	for _, r := range lb.HTTP.Rules {
		if len(r.Query) > 0 {
			return lbmodel.UnsupportedRule(r, "query")
		}
	}
	return nil
}

func withQuery(name, value string) routeMod {
	return func(r *gatewayv1.HTTPRoute) {
		last := &r.Spec.Rules[len(r.Spec.Rules)-1]
		last.Matches[0].QueryParams = append(last.Matches[0].QueryParams, gatewayv1.HTTPQueryParamMatch{Name: gatewayv1.HTTPHeaderName(name), Value: value})
	}
}

// TestBuild_refusesRoutesTheProviderCannotExpress: a route with a rule
// the provider refuses (Input.Rules) is left out, with its pools and
// backends, and is not accepted (UnsupportedValue, the provider's message);
// its neighbours are served as if it did not exist, and a newer route
// with the same match takes its place.
func TestBuild_refusesRoutesTheProviderCannotExpress(t *testing.T) {
	web := route("web", 300, rule([]gatewayv1.HTTPRouteMatch{prefixM("/web")}, svcRef("a", 1)))
	// The oldest route: its first rule is served alone, its second needs a
	// query match.
	q := route("q", 100, rule([]gatewayv1.HTTPRouteMatch{exactM("/same")}, svcRef("b", 1)),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/q")}, svcRef("b", 1)), withQuery("v", "2"))
	same := route("same", 200, rule([]gatewayv1.HTTPRouteMatch{exactM("/same")}, svcRef("a", 1)))
	g := grpcRoute("g", 150, gatewayv1.GRPCRouteRule{BackendRefs: []gatewayv1.GRPCBackendRef{grpcRef("b", 1)}})
	in := Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")),
		Routes: []*gatewayv1.HTTPRoute{web, q, same}, GRPCRoutes: []*gatewayv1.GRPCRoute{g},
		Services: []*corev1.Service{service(appNS, "a"), service(appNS, "b")},
		Pods:     []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), pod(appNS, "b", "b-1", "198.18.0.2", 61001)}}
	tests := []struct {
		name  string
		rules providers.ModelChecker
		// served are the routes whose rules and pools are in the model.
		served, refused []string
		backends        []ServiceRef
	}{
		{name: "every rule expressed", served: []string{"g", "q", "same", "web"},
			backends: []ServiceRef{{appNS, "a"}, {appNS, "b"}}},
		{name: "query and h2c refused", rules: refusing{}, served: []string{"same", "web"}, refused: []string{"g", "q"},
			backends: []ServiceRef{{appNS, "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := in
			in.Checker = tt.rules
			res := Build(in)
			if res.LB == nil {
				t.Fatalf("no model: %v", res.Report.Errors)
			}
			var pools, rules []string
			for _, p := range res.LB.Pools {
				pools = append(pools, p.Name)
			}
			for _, r := range res.LB.HTTP.Rules {
				rules = append(rules, r.Path+" "+r.Pool)
			}
			var wantPools []string
			for _, name := range tt.served {
				if name == "g" {
					wantPools = append(wantPools, grpcPoolName("g", 0))
					continue
				}
				for i := range len(map[string]*gatewayv1.HTTPRoute{"web": web, "q": q, "same": same}[name].Spec.Rules) {
					wantPools = append(wantPools, poolName(name, i))
				}
			}
			slices.Sort(wantPools)
			slices.Sort(pools)
			if diff := cmp.Diff(wantPools, pools); diff != "" {
				t.Errorf("pools (-want +got):\n%s", diff)
			}
			// /same goes to the oldest route that is served.
			wantSame := poolName("q", 0)
			if slices.Contains(tt.refused, "q") {
				wantSame = poolName("same", 0)
			}
			if !slices.Contains(rules, "/same "+wantSame) {
				t.Errorf("rules %v: /same not to %s", rules, wantSame)
			}
			if diff := cmp.Diff(tt.backends, res.Backends); diff != "" {
				t.Errorf("backends (-want +got):\n%s", diff)
			}
			for _, name := range tt.served {
				kind := KindHTTPRoute
				if name == "g" {
					kind = KindGRPCRoute
				}
				if c := parentCond(t, res, kind, name, "Accepted"); c.Status != metav1.ConditionTrue {
					t.Errorf("%s: Accepted %+v, want True", name, c)
				}
			}
			for name, want := range map[string]string{
				"q": "rule /q (Prefix): query is not supported by this provider",
				"g": "pool " + grpcPoolName("g", 0) + ": appProtocol h2c is not supported by this provider",
			} {
				if !slices.Contains(tt.refused, name) {
					continue
				}
				kind := KindHTTPRoute
				if name == "g" {
					kind = KindGRPCRoute
				}
				c := parentCond(t, res, kind, name, "Accepted")
				if c.Status != metav1.ConditionFalse || c.Reason != string(gatewayv1.RouteReasonUnsupportedValue) || c.Message != want ||
					c.ObservedGeneration == 0 {
					t.Errorf("%s: Accepted %+v, want False UnsupportedValue %q", name, c, want)
				}
			}
			if got, want := listenerResult(t, res, "http").Status.AttachedRoutes, int32(len(tt.served)); got != want {
				t.Errorf("attachedRoutes %d, want %d", got, want)
			}
			if len(tt.refused) > 0 && len(res.Report.Errors) != len(tt.refused) {
				t.Errorf("errors %v, want one per refused route", res.Report.Errors)
			}
			if _, err := lbmodel.Normalize(res.LB); err != nil {
				t.Errorf("the model does not pass Normalize: %v", err)
			}
		})
	}
}

// TestBuild_refusesListenersTheProviderCannotServe: a TLS listener the
// provider cannot serve (Input.Checker) is not accepted
// (UnsupportedProtocol, the provider's message), takes no route kind and
// no route, and is not in the model; the Gateway is Accepted with it
// counted as not valid, and its HTTP listener and route are served. A
// TLSRoute to the refused listener is not accepted.
func TestBuild_refusesListenersTheProviderCannotServe(t *testing.T) {
	web := route("web", 100, rule([]gatewayv1.HTTPRouteMatch{prefixM("/")}, svcRef("a", 1)))
	in := Input{ClusterName: testCluster,
		Gateway: gateway(httpL("http", 80, ""), tlsL("tls", 8443, "", gatewayv1.TLSModePassthrough)),
		Routes:  []*gatewayv1.HTTPRoute{web}, TLSRoutes: []*gatewayv1.TLSRoute{tlsRoute("pass", 100, "tls", []string{"db.example.com"}, ref("a", 80, 1))},
		Services: []*corev1.Service{service(appNS, "a")}, Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000)}}

	served := Build(in)
	if served.LB == nil || len(served.LB.Listeners) != 2 {
		t.Fatalf("without a checker: model %+v, want both listeners (%v)", served.LB, served.Report.Errors)
	}

	in.Checker = refusing{}
	res := Build(in)
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	if len(res.LB.Listeners) != 1 || res.LB.Listeners[0].Port != 80 || len(res.LB.HTTP.Rules) == 0 {
		t.Errorf("listeners %+v, rules %d: want the HTTP listener on 80 and its rules", res.LB.Listeners, len(res.LB.HTTP.Rules))
	}
	l := listenerResult(t, res, "tls")
	want := "listener TLS/8443: a TLS listener is not supported by this provider"
	if c := cond(l.Status.Conditions, "Accepted"); c.Status != metav1.ConditionFalse ||
		c.Reason != string(gatewayv1.ListenerReasonUnsupportedProtocol) || c.Message != want {
		t.Errorf("tls listener Accepted %+v, want False UnsupportedProtocol %q", c, want)
	}
	if l.Status.AttachedRoutes != 0 || len(l.Status.SupportedKinds) != 0 {
		t.Errorf("tls listener: %d routes, kinds %v; want none", l.Status.AttachedRoutes, l.Status.SupportedKinds)
	}
	if c := res.Accepted; c.Status != metav1.ConditionTrue || c.Reason != string(gatewayv1.GatewayReasonListenersNotValid) {
		t.Errorf("Gateway Accepted %+v, want True ListenersNotValid", c)
	}
	if c := parentCond(t, res, KindHTTPRoute, "web", "Accepted"); c.Status != metav1.ConditionTrue {
		t.Errorf("web: Accepted %+v, want True", c)
	}
	if c := parentCond(t, res, KindTLSRoute, "pass", "Accepted"); c.Status != metav1.ConditionFalse {
		t.Errorf("pass: Accepted %+v, want False", c)
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Errorf("the model does not pass Normalize: %v", err)
	}
}
