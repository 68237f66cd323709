package gateway

import (
	"fmt"
	"slices"
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

// inNS moves a route to namespace ns; its backendRefs stay in it.
func inNS(ns string) routeMod { return func(r *gatewayv1.HTTPRoute) { r.Namespace = ns } }

// tenants is a Gateway with the given listeners and two tenants' Services
// and Pods, shop's and evil's.
func tenants(routes []*gatewayv1.HTTPRoute, ls ...gatewayv1.Listener) Input {
	return Input{ClusterName: testCluster, Gateway: gateway(ls...), Routes: routes,
		Services: []*corev1.Service{service(appNS, "a"), service("evil", "a")},
		Pods:     []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), pod("evil", "a", "a-1", "198.18.0.2", 61001)}}
}

// hostsOf returns the hosts the model routes to pools of namespace ns.
func hostsOf(lb *lbmodel.LoadBalancer, ns string) []string {
	var out []string
	for _, r := range lb.HTTP.Rules {
		if strings.Contains(r.Pool, "_"+ns+"_") && !slices.Contains(out, r.Host) {
			out = append(out, r.Host)
		}
	}
	slices.Sort(out)
	return out
}

// TestBuild_aHostOfASharedListenerBelongsToTheOldestRoute: on a listener
// without a hostname that takes routes from every namespace, another
// namespace's newer route gets no rule for a host an older route claims
// (its /login would have taken the owner's requests), nor for every host
// when an older route claims that; it keeps its other hosts, its parent
// status says which it lost (Accepted False HostnameInUse when it lost
// all) and its owner gets an Event. A listener with a hostname, or one
// for the Gateway's namespace only, is the Gateway owner's to share: routes
// merge there as Gateway API says.
func TestBuild_aHostOfASharedListenerBelongsToTheOldestRoute(t *testing.T) {
	shop := route("shop", 100, hostnames("shop.example"), rule([]gatewayv1.HTTPRouteMatch{prefixM("/")}, svcRef("a", 1)))
	login := route("login", 200, inNS("evil"), hostnames("shop.example", "evil.example"),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/login")}, svcRef("a", 1)))
	only := route("only", 300, inNS("evil"), hostnames("shop.example"), rule([]gatewayv1.HTTPRouteMatch{exactM("/pay")}, svcRef("a", 1)))
	res := Build(tenants([]*gatewayv1.HTTPRoute{only, login, shop}, httpL("http", 80, "")))
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	if got := hostsOf(res.LB, "evil"); !slices.Equal(got, []string{"evil.example"}) {
		t.Errorf("evil's rules are for %v, want evil.example only", got)
	}
	if got := hostsOf(res.LB, appNS); !slices.Equal(got, []string{"shop.example"}) {
		t.Errorf("shop's rules are for %v", got)
	}
	if c := parentCond(t, res, KindHTTPRoute, "login", "Accepted"); c.Status != metav1.ConditionTrue ||
		!strings.Contains(c.Message, "shop.example on port 80 (namespace shop owns it: httproute shop/shop is older)") {
		t.Errorf("login: Accepted %+v, want True naming the host it lost", c)
	}
	if c := parentCond(t, res, KindHTTPRoute, "only", "Accepted"); c.Status != metav1.ConditionFalse || c.Reason != ReasonHostnameInUse {
		t.Errorf("only: Accepted %+v, want False %s", c, ReasonHostnameInUse)
	}
	if c := parentCond(t, res, KindHTTPRoute, "shop", "Accepted"); c.Status != metav1.ConditionTrue || c.Message != "Accepted" {
		t.Errorf("shop: Accepted %+v", c)
	}
	var told []string
	for _, ev := range res.RouteEvents {
		told = append(told, ev.Namespace+"/"+ev.Name+" "+ev.Reason)
	}
	if want := []string{"evil/login HostnameInUse", "evil/only HostnameInUse"}; !slices.Equal(told, want) {
		t.Errorf("route Events %v, want %v", told, want)
	}

	// The rules for every host are owned too.
	anyHost := route("any", 100, rule([]gatewayv1.HTTPRouteMatch{prefixM("/")}, svcRef("a", 1)))
	evilAny := route("any", 200, inNS("evil"), rule([]gatewayv1.HTTPRouteMatch{prefixM("/login")}, svcRef("a", 1)))
	res = Build(tenants([]*gatewayv1.HTTPRoute{evilAny, anyHost}, httpL("http", 80, "")))
	if got := hostsOf(res.LB, "evil"); len(got) != 0 {
		t.Errorf("evil's rules for every host are in the model: %v", got)
	}

	// Not on a listener with a hostname, nor on one for the Gateway's own
	// namespace.
	named := httpL("http", 80, "shop.example")
	same := httpL("http", 80, "")
	same.AllowedRoutes.Namespaces.From = ptr(gatewayv1.NamespacesFromSame)
	res = Build(tenants([]*gatewayv1.HTTPRoute{login, shop}, named))
	if got := hostsOf(res.LB, "evil"); !slices.Equal(got, []string{"shop.example"}) {
		t.Errorf("a listener with a hostname: evil's rules are for %v, want shop.example (merged)", got)
	}
	if (&listener{spec: &same}).shared() {
		t.Error("a listener for the Gateway's namespace only is taken for a shared one")
	}
}

// TestBuild_aRefusedRouteTakesAwayOnlyItsOwnPools: a route that is refused
// removes the pools it made, never another route's pool that happens to
// have the same name (a/b-shop and a-b/shop once shared one): the model
// stays valid and the older route served.
func TestBuild_aRefusedRouteTakesAwayOnlyItsOwnPools(t *testing.T) {
	victim := route("b-shop", 100, inNS("a"), rule([]gatewayv1.HTTPRouteMatch{prefixM("/shop")}, svcRef("a", 1)))
	// A control character in a header match passes the route's own checks
	// and is refused with the rules (lbmodel.CheckRule).
	m := prefixM("/shop")
	m.Headers = []gatewayv1.HTTPHeaderMatch{{Name: "x-evil", Value: "a\x01"}}
	evil := route("shop", 200, inNS("a-b"), rule([]gatewayv1.HTTPRouteMatch{m}, svcRef("a", 1)))
	// A listener with a hostname: both routes attach (no host is owned).
	in := tenants([]*gatewayv1.HTTPRoute{victim, evil}, httpL("http", 80, "shop.example"))
	in.Services = append(in.Services, service("a", "a"), service("a-b", "a"))
	res := Build(in)
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Fatalf("the model does not pass Normalize: %v", err)
	}
	if c := parentCond(t, res, KindHTTPRoute, "b-shop", "Accepted"); c.Status != metav1.ConditionTrue {
		t.Errorf("the victim: Accepted %+v", c)
	}
	if c := parentCond(t, res, KindHTTPRoute, "shop", "Accepted"); c.Status != metav1.ConditionFalse {
		t.Errorf("the refused route: Accepted %+v", c)
	}
}

// TestBuild_anOversizeRouteStopsOnlyItself: a route whose matches times
// hostnames give more rules than one object may add, or that would take
// the model over its size, is refused alone (UnsupportedValue, a TooLarge
// Event); older routes are served.
func TestBuild_anOversizeRouteStopsOnlyItself(t *testing.T) {
	web := route("web", 100, rule([]gatewayv1.HTTPRouteMatch{prefixM("/web")}, svcRef("a", 1)))
	var matches []gatewayv1.HTTPRouteMatch
	for i := range 64 {
		matches = append(matches, exactM(fmt.Sprintf("/m%d", i)))
	}
	var hosts []string
	for i := range 16 {
		hosts = append(hosts, fmt.Sprintf("h%d.example", i))
	}
	many := route("many", 200, inNS("evil"), hostnames(hosts...), rule(matches, svcRef("a", 1)))
	long := "/" + strings.Repeat("a", 1000)
	var bigMatches []gatewayv1.HTTPRouteMatch
	for i := range 64 {
		bigMatches = append(bigMatches, exactM(fmt.Sprintf("%s%d", long, i)))
	}
	routes := []*gatewayv1.HTTPRoute{web, many}
	for i := range 40 {
		routes = append(routes, route(fmt.Sprintf("big%02d", i), int64(300+i), inNS("evil"),
			hostnames(fmt.Sprintf("b%d.example", i), fmt.Sprintf("c%d.example", i)), rule(bigMatches, svcRef("a", 1))))
	}
	res := Build(tenants(routes, httpL("http", 80, "")))
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Fatalf("the model does not pass Normalize: %v", err)
	}
	if c := parentCond(t, res, KindHTTPRoute, "web", "Accepted"); c.Status != metav1.ConditionTrue {
		t.Errorf("web: Accepted %+v", c)
	}
	if c := parentCond(t, res, KindHTTPRoute, "many", "Accepted"); c.Status != metav1.ConditionFalse ||
		!strings.Contains(c.Message, fmt.Sprintf("adds %d rules to the Gateway's model, more than %d", 64*16, lbmodel.MaxObjectRules)) {
		t.Errorf("many: Accepted %+v", c)
	}
	if c := parentCond(t, res, KindHTTPRoute, "big39", "Accepted"); c.Status != metav1.ConditionFalse ||
		!strings.Contains(c.Message, "the Gateway's model would take more than") {
		t.Errorf("the newest big route: Accepted %+v, want False for the model's size", c)
	}
	if c := parentCond(t, res, KindHTTPRoute, "big00", "Accepted"); c.Status != metav1.ConditionTrue {
		t.Errorf("the oldest big route: Accepted %+v", c)
	}
	if !slices.ContainsFunc(res.RouteEvents, func(e RouteEvent) bool { return e.Name == "many" && e.Reason == ReasonTooLarge }) {
		t.Errorf("no TooLarge Event for many: %v", res.RouteEvents)
	}
}
