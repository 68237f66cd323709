package gateway

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/sim/bigip/bigipsim"
)

// TestLBSync_gatewayOnBIGIP: a Gateway whose HTTPRoute has weighted
// backends, a header match, header filters and a redirect, on the BIG-IP
// provider through go-bigip and the simulator: the Gateway is Programmed,
// the listener's LTM policy holds the rules, the pool weighs its members
// by ratio; a restarted npl-lbsync writes nothing; a route with a 301
// redirect, which an LTM policy cannot answer, is not accepted and left
// out, while the Gateway stays Programmed and its other route follows a
// scale change; the Gateway deleted, its objects go.
func TestLBSync_gatewayOnBIGIP(t *testing.T) {
	e := setup(t)
	b := e.startGatewayBed(t, "bigip", "gwbig", "198.18.113.0/28")
	ctx, l, gw1, ns, className, name, cfg := b.ctx, b.l, b.gw1, b.ns, b.class, b.name, b.cfg
	sim := b.backend.(interface{ Sim() *bigipsim.Server }).Sim()
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: gatewayv1.ObjectName(className),
		Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType},
			// BIG-IP serves no TLS listener: this one is refused alone.
			{Name: "db", Port: 5432, Protocol: gatewayv1.TLSProtocolType, TLS: &gatewayv1.ListenerTLSConfig{Mode: ptr.To(gatewayv1.TLSModePassthrough)}}},
	}}
	if _, err := gw1.Gateways(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := func(svc string, weight int32) gatewayv1.HTTPBackendRef {
		port := gatewayv1.PortNumber(80)
		return gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(svc), Port: &port}, Weight: &weight}}
	}
	prefix, exact := gatewayv1.PathMatchPathPrefix, gatewayv1.PathMatchExact
	shopPath, oldPath := "/shop", "/old"
	https := "https"
	route := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: gatewayv1.HTTPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
		Hostnames:       []gatewayv1.Hostname{"shop.example.com"},
		Rules: []gatewayv1.HTTPRouteRule{
			{
				Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &prefix, Value: &shopPath},
					Headers: []gatewayv1.HTTPHeaderMatch{{Name: "X-Env", Value: "canary"}}}},
				Filters: []gatewayv1.HTTPRouteFilter{
					{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{
						Set: []gatewayv1.HTTPHeader{{Name: "X-Set", Value: "1"}}}},
					{Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gatewayv1.HTTPHeaderFilter{
						Add: []gatewayv1.HTTPHeader{{Name: "X-Out", Value: "2"}}}},
				},
				BackendRefs: []gatewayv1.HTTPBackendRef{ref("a", 3), ref("b", 1)},
			},
			{
				Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &exact, Value: &oldPath}}},
				Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestRedirect,
					RequestRedirect: &gatewayv1.HTTPRequestRedirectFilter{Scheme: &https, StatusCode: ptr.To(302)}}},
			},
		},
	}}
	if _, err := gw1.HTTPRoutes(ns).Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	lbName := lbmodel.GatewayLoadBalancerName(name, ns, "gw")
	p := "/npl-" + name + "/"
	pool := p + lbmodel.GatewayPoolName(lbName, ns, "web", 0)
	policy := p + lbmodel.ListenerName(lbName, lbmodel.HTTP, 80)
	wantRules := []string{
		"rule-0.0: httpHost host equals [shop.example.com]; httpUri path equals [/old] -> redirect tcl:https://" +
			`[getfield [HTTP::host] ":" 1][HTTP::uri]`,
		"rule-1.0: httpHost host equals [shop.example.com]; httpUri path equals [/shop]; httpHeader name=X-Env equals [canary] -> " +
			"header replace X-Set 1, forward " + pool + ", header insert X-Out 2 at response",
		"rule-1.1: httpHost host equals [shop.example.com]; httpUri path startsWith [/shop/]; httpHeader name=X-Env equals [canary] -> " +
			"header replace X-Set 1, forward " + pool + ", header insert X-Out 2 at response",
	}
	ip0, ip1 := e.NodeIP(0), e.NodeIP(1)
	wantMembers := []bigipsim.Member{
		{FullPath: p + ip0 + ":61000", Address: ip0, Session: "user-enabled", State: "unchecked", Ratio: 256},
		{FullPath: p + ip1 + ":61001", Address: ip1, Session: "user-enabled", State: "unchecked", Ratio: 85},
	}
	lbsyncbed.WaitFor(t, 60*time.Second, "the Gateway's objects on the BIG-IP", func() (bool, error) {
		st := sim.Dump()
		i := slices.IndexFunc(st.Policies, func(pol bigipsim.Policy) bool { return pol.FullPath == policy })
		if i < 0 || !slices.Equal(st.Policies[i].Rules, wantRules) {
			return false, fmt.Errorf("policies %+v", st.Policies)
		}
		j := slices.IndexFunc(st.Pools, func(pl bigipsim.Pool) bool { return pl.FullPath == pool })
		if j < 0 || st.Pools[j].LoadBalancingMode != "ratio-member" || !slices.Equal(st.Pools[j].Members, wantMembers) {
			return false, fmt.Errorf("pools %+v", st.Pools)
		}
		return true, nil
	})
	programmed := func(status metav1.ConditionStatus, reason string) func() (bool, error) {
		return func() (bool, error) {
			g, err := gw1.Gateways(ns).Get(ctx, "gw", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return hasCond(g.Status.Conditions, "Programmed", status, reason) && len(g.Status.Addresses) == 1,
				fmt.Errorf("status %+v", g.Status.Conditions)
		}
	}
	lbsyncbed.WaitFor(t, 30*time.Second, "the Gateway Programmed", programmed(metav1.ConditionTrue, "Programmed"))
	listenerRefused(t, b.gw1, ns, "gw", "db", "UnsupportedProtocol", "a TLS listener (SNI routing, TLSRoute) is not supported")
	lbsyncbed.WaitFor(t, 30*time.Second, "the route accepted", func() (bool, error) {
		rt, err := gw1.HTTPRoutes(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && len(rt.Status.Parents) == 1 && hasCond(rt.Status.Parents[0].Conditions, "Accepted", metav1.ConditionTrue, "Accepted") &&
			hasCond(rt.Status.Parents[0].Conditions, "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs"), err
	})

	// A restarted npl-lbsync writes nothing.
	e.SyncedAfter(t, "services", ns, "a", l)
	writes := sim.Writes()
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	l2 := e.StartSyncer(t, "npl-lbsync-gwbig-2", name, cfg, false)
	e.SyncedAfter(t, "services", ns, "a", l2)
	e.SyncedAfter(t, "services", ns, "b", l2)
	if w := sim.Writes(); w != writes {
		t.Errorf("the restarted npl-lbsync wrote %d times: %v", w-writes, sim.Calls())
	}

	// A route with a 301 redirect, which an LTM policy cannot answer: that
	// route is not accepted (UnsupportedValue, BIG-IP's message) and left
	// out; the Gateway stays Programmed and web follows a scale change of a.
	if _, err := gw1.HTTPRoutes(ns).Create(ctx, &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "moved"},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &exact, Value: ptr.To("/moved")}}},
				Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestRedirect,
					RequestRedirect: &gatewayv1.HTTPRequestRedirectFilter{Scheme: &https, StatusCode: ptr.To(301)}}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 30*time.Second, "route moved not accepted", func() (bool, error) {
		rt, err := gw1.HTTPRoutes(ns).Get(ctx, "moved", metav1.GetOptions{})
		if err != nil || len(rt.Status.Parents) != 1 {
			return false, err
		}
		c := rt.Status.Parents[0].Conditions
		i := slices.IndexFunc(c, func(c metav1.Condition) bool { return c.Type == "Accepted" })
		return i >= 0 && c[i].Status == metav1.ConditionFalse && c[i].Reason == "UnsupportedValue" &&
			strings.Contains(c[i].Message, "redirect statusCode 301"), fmt.Errorf("parents %+v", rt.Status.Parents)
	})
	e.Pod(t, ns, "a-2", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, ip0, 61002, "tcp")), func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "a"}
	})
	// a's two Pods share weight 3, b's one has 1: ratios 256, 256, 171.
	wantMembers = []bigipsim.Member{
		{FullPath: p + ip0 + ":61000", Address: ip0, Session: "user-enabled", State: "unchecked", Ratio: 256},
		{FullPath: p + ip0 + ":61002", Address: ip0, Session: "user-enabled", State: "unchecked", Ratio: 256},
		{FullPath: p + ip1 + ":61001", Address: ip1, Session: "user-enabled", State: "unchecked", Ratio: 171},
	}
	lbsyncbed.WaitFor(t, 30*time.Second, "the pool of web with a-2", func() (bool, error) {
		st := sim.Dump()
		j := slices.IndexFunc(st.Pools, func(pl bigipsim.Pool) bool { return pl.FullPath == pool })
		if j < 0 || !slices.Equal(st.Pools[j].Members, wantMembers) {
			return false, fmt.Errorf("pools %+v", st.Pools)
		}
		i := slices.IndexFunc(st.Policies, func(pol bigipsim.Policy) bool { return pol.FullPath == policy })
		return i >= 0 && slices.Equal(st.Policies[i].Rules, wantRules), fmt.Errorf("policies %+v", st.Policies)
	})
	lbsyncbed.WaitFor(t, 30*time.Second, "the Gateway still Programmed", programmed(metav1.ConditionTrue, "Programmed"))

	// The Gateway deleted: its objects go.
	if err := gw1.Gateways(ns).Delete(ctx, "gw", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 30*time.Second, "the Gateway's objects deleted", func() (bool, error) {
		st := sim.Dump()
		n := 0
		for _, fp := range slices.Concat(objectPaths(st.Virtuals, func(v bigipsim.Virtual) string { return v.FullPath }),
			objectPaths(st.Pools, func(v bigipsim.Pool) string { return v.FullPath }),
			objectPaths(st.Policies, func(v bigipsim.Policy) string { return v.FullPath })) {
			if strings.Contains(fp, lbName) {
				n++
			}
		}
		return n == 0, fmt.Errorf("%d objects left", n)
	})
}

func objectPaths[T any](items []T, path func(T) string) []string {
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, path(it))
	}
	return out
}
