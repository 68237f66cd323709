package gateway

import (
	"encoding/json"
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
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// aviObjects is the Avi simulator backend's view of its objects.
type aviObjects interface {
	Objects(kind string) []map[string]any
}

// TestLBSync_gatewayOnAvi: npl-lbsync with the Avi provider (the alb-sdk
// client against the Avi simulator) serves a Gateway whose HTTPRoute has a
// weighted rule with a method, a header match and a request header
// modifier, a redirect and a rewrite: the Gateway and route are Programmed
// and Accepted, the simulator holds the pool group (ratios of the weights),
// the request rules and the certificate. A route Avi cannot express (a
// query match) is not accepted, naming it, and left out; the Gateway stays
// Programmed and its other route follows a scale change. A restarted
// npl-lbsync writes nothing; the Gateway deleted, every object of its load
// balancer goes.
func TestLBSync_gatewayOnAvi(t *testing.T) {
	e := setup(t)
	b := e.startGatewayBed(t, "avi", "gwavi", "198.18.114.0/28")
	ctx, l, gw1, ns, className, name, cfg := b.ctx, b.l, b.gw1, b.ns, b.class, b.name, b.cfg
	backend := b.backend
	sim := backend.(aviObjects)
	certPEM, keyPEM := selfSigned(t, "shop.example.com")
	if _, err := e.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tls"},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gw1.Gateways(ns).Create(ctx, &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gatewayv1.ObjectName(className), Listeners: []gatewayv1.Listener{
			{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType},
			{Name: "https", Port: 443, Protocol: gatewayv1.HTTPSProtocolType,
				TLS: &gatewayv1.ListenerTLSConfig{CertificateRefs: []gatewayv1.SecretObjectReference{{Name: "tls"}}}},
			// Avi serves no TLS listener: this one is refused alone.
			{Name: "db", Port: 5432, Protocol: gatewayv1.TLSProtocolType, TLS: &gatewayv1.ListenerTLSConfig{Mode: ptr.To(gatewayv1.TLSModePassthrough)}},
		}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exact, prefix := gatewayv1.PathMatchExact, gatewayv1.PathMatchPathPrefix
	path := func(typ gatewayv1.PathMatchType, p string) *gatewayv1.HTTPPathMatch {
		return &gatewayv1.HTTPPathMatch{Type: &typ, Value: &p}
	}
	ref := func(svc string, weight int32) gatewayv1.HTTPBackendRef {
		port := gatewayv1.PortNumber(80)
		return gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(svc), Port: &port}, Weight: &weight}}
	}
	get, https, status301 := gatewayv1.HTTPMethodGet, "https", 301
	fullPath := func(p string) *gatewayv1.HTTPPathModifier {
		return &gatewayv1.HTTPPathModifier{Type: gatewayv1.FullPathHTTPPathModifier, ReplaceFullPath: &p}
	}
	backendHost := gatewayv1.PreciseHostname("backend.internal")
	route := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1"}, Spec: gatewayv1.HTTPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
		Hostnames:       []gatewayv1.Hostname{"shop.example.com"},
		Rules: []gatewayv1.HTTPRouteRule{
			{Matches: []gatewayv1.HTTPRouteMatch{{Path: path(prefix, "/b"), Method: &get,
				Headers: []gatewayv1.HTTPHeaderMatch{{Name: "x-canary", Value: "yes"}}}},
				Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier,
					RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "x-env", Value: "avi"}}}}},
				BackendRefs: []gatewayv1.HTTPBackendRef{ref("a", 3), ref("b", 1)}},
			{Matches: []gatewayv1.HTTPRouteMatch{{Path: path(exact, "/old")}},
				Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestRedirect,
					RequestRedirect: &gatewayv1.HTTPRequestRedirectFilter{Scheme: &https, StatusCode: &status301}}}},
			{Matches: []gatewayv1.HTTPRouteMatch{{Path: path(prefix, "/r")}},
				Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterURLRewrite,
					URLRewrite: &gatewayv1.HTTPURLRewriteFilter{Hostname: &backendHost, Path: fullPath("/x")}}},
				BackendRefs: []gatewayv1.HTTPBackendRef{ref("a", 1)}},
		},
	}}
	if _, err := gw1.HTTPRoutes(ns).Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	programmed := func(what string, status metav1.ConditionStatus, reason, message string) {
		t.Helper()
		lbsyncbed.WaitFor(t, 45*time.Second, what, func() (bool, error) {
			g, err := gw1.Gateways(ns).Get(ctx, "gw", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			i := slices.IndexFunc(g.Status.Conditions, func(c metav1.Condition) bool { return c.Type == "Programmed" })
			if i < 0 || g.Status.Conditions[i].Status != status || g.Status.Conditions[i].Reason != reason ||
				!strings.Contains(g.Status.Conditions[i].Message, message) {
				return false, fmt.Errorf("status %+v", g.Status)
			}
			return status == metav1.ConditionFalse || len(g.Status.Addresses) == 1, nil
		})
	}
	programmed("the Gateway programmed", metav1.ConditionTrue, "Programmed", "")
	listenerRefused(t, b.gw1, ns, "gw", "db", "UnsupportedProtocol", "a TLS listener of a Gateway is not supported")
	lbsyncbed.WaitFor(t, 30*time.Second, "route r1 accepted", func() (bool, error) {
		rt, err := gw1.HTTPRoutes(ns).Get(ctx, "r1", metav1.GetOptions{})
		if err != nil || len(rt.Status.Parents) != 1 {
			return false, err
		}
		c := rt.Status.Parents[0].Conditions
		return hasCond(c, "Accepted", metav1.ConditionTrue, "Accepted") && hasCond(c, "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs"),
			fmt.Errorf("parents %+v", rt.Status.Parents)
	})

	// What the controller holds: weights 3:1 of one Pod each are the member
	// weights 256 and 85, the ratios of the pool group.
	lbName := lbmodel.GatewayLoadBalancerName(name, ns, "gw")
	weighted := lbmodel.GatewayPoolName(lbName, ns, "r1", 0)
	wantGroup := []string{weighted + "-w256:256", weighted + "-w85:85", weighted + ":0"} // sorted
	if got := poolGroupMembers(sim, weighted); !slices.Equal(got, wantGroup) {
		t.Errorf("pool group %s: %v, want %v", weighted, got, wantGroup)
	}
	rules := requestRules(t, sim, lbName)
	for _, want := range []string{
		`"method":{"match_criteria":"IS_IN","methods":["HTTP_METHOD_GET"]}`,
		`"hdrs":[{"hdr":"x-canary","match_case":"SENSITIVE","match_criteria":"HDR_EQUALS","value":["yes"]}]`,
		`"hdr_action":[{"action":"HTTP_REPLACE_HDR","hdr":{"name":"x-env","value":{"val":"avi"}}}]`,
		`"redirect_action":{"keep_query":true,"port":443,"protocol":"HTTPS","status_code":"HTTP_REDIRECT_STATUS_CODE_301"}`,
		`"rewrite_url_action":{"host_hdr":{"tokens":[{"str_value":"backend.internal","type":"URI_TOKEN_TYPE_STRING"}]`,
		`"action":"HTTP_SWITCHING_SELECT_POOLGROUP"`,
		`"name":"no-match-404","switching_action":{"action":"HTTP_SWITCHING_SELECT_LOCAL","status_code":"HTTP_LOCAL_RESPONSE_STATUS_CODE_404"}`,
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("the request rules lack %s:\n%s", want, rules)
		}
	}
	if n := len(objectsNamed(sim, "sslkeyandcertificate", lbName)); n != 1 {
		t.Errorf("%d certificates of %s, want 1", n, lbName)
	}

	// A route with a query match, which Avi cannot express: that route is
	// not accepted (UnsupportedValue, Avi's message) and left out; the
	// Gateway stays Programmed and r1 follows a scale change of a.
	if _, err := gw1.HTTPRoutes(ns).Create(ctx, &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "q"},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{{Path: path(prefix, "/q"),
				QueryParams: []gatewayv1.HTTPQueryParamMatch{{Name: "v", Value: "2"}}}},
				BackendRefs: []gatewayv1.HTTPBackendRef{ref("b", 1)}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 30*time.Second, "route q not accepted", func() (bool, error) {
		rt, err := gw1.HTTPRoutes(ns).Get(ctx, "q", metav1.GetOptions{})
		if err != nil || len(rt.Status.Parents) != 1 {
			return false, err
		}
		c := rt.Status.Parents[0].Conditions
		i := slices.IndexFunc(c, func(c metav1.Condition) bool { return c.Type == "Accepted" })
		return i >= 0 && c[i].Status == metav1.ConditionFalse && c[i].Reason == "UnsupportedValue" &&
			strings.Contains(c[i].Message, "query (Avi matches a query only by substring) is not supported"), fmt.Errorf("parents %+v", rt.Status.Parents)
	})
	e.Pod(t, ns, "a-2", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61002, "tcp")), func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "a"}
	})
	// a's two Pods share weight 3, b's one has 1: member weights 256 and
	// 171, ratios 2 × 256 and 171.
	wantGroup = []string{weighted + "-w171:171", weighted + "-w256:512", weighted + ":0"}
	lbsyncbed.WaitFor(t, 30*time.Second, "the pool group of r1 with a-2", func() (bool, error) {
		got := poolGroupMembers(sim, weighted)
		return slices.Equal(got, wantGroup), fmt.Errorf("pool group %v, want %v", got, wantGroup)
	})
	programmed("the Gateway still programmed", metav1.ConditionTrue, "Programmed", "")
	if n := len(objectsNamed(sim, "pool", lbmodel.GatewayPoolName(lbName, ns, "q", 0))); n != 0 {
		t.Errorf("%d pools of the refused route q, want none", n)
	}
	if err := gw1.HTTPRoutes(ns).Delete(ctx, "q", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// A restarted npl-lbsync writes nothing.
	before := lbsyncbed.Snapshot(t, backend, lbName)
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	l2 := e.StartSyncer(t, "npl-lbsync-gwavi-2", name, cfg, false)
	lbsyncbed.WaitFor(t, 30*time.Second, "the restarted npl-lbsync's first sync", func() (bool, error) { return l2.Ready(), nil })
	before.Unchanged(t, backend, l2, "a restart")

	// The Gateway deleted: every object of its load balancer goes.
	if err := gw1.Gateways(ns).Delete(ctx, "gw", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 30*time.Second, "the Gateway's objects deleted", func() (bool, error) {
		var left []string
		for _, kind := range []string{"virtualservice", "httppolicyset", "poolgroup", "pool", "sslkeyandcertificate", "vsvip"} {
			left = append(left, objectsNamed(sim, kind, lbName)...)
		}
		return len(left) == 0, fmt.Errorf("left: %v", left)
	})
}

// objectsNamed returns the names of the simulator's objects of kind named
// lbName or lbName-*.
func objectsNamed(sim aviObjects, kind, lbName string) []string {
	var out []string
	for _, o := range sim.Objects(kind) {
		if n, _ := o["name"].(string); n == lbName || stack.OfLoadBalancer(n, lbName) {
			out = append(out, kind+"/"+n)
		}
	}
	return out
}

// poolGroupMembers returns "<pool>:<ratio>" for each member of the pool
// group name, sorted.
func poolGroupMembers(sim aviObjects, name string) []string {
	poolNames := map[string]string{}
	for _, p := range sim.Objects("pool") {
		poolNames[fmt.Sprint(p["uuid"])] = fmt.Sprint(p["name"])
	}
	var out []string
	for _, g := range sim.Objects("poolgroup") {
		if g["name"] != name {
			continue
		}
		members, _ := g["members"].([]any)
		for _, raw := range members {
			m, _ := raw.(map[string]any)
			ref, _, _ := strings.Cut(fmt.Sprint(m["pool_ref"]), "#")
			out = append(out, fmt.Sprintf("%s:%v", poolNames[ref[strings.LastIndexByte(ref, '/')+1:]], m["ratio"]))
		}
	}
	slices.Sort(out)
	return out
}

// requestRules returns the request rules of the HTTP policy set lbName as
// JSON.
func requestRules(t *testing.T, sim aviObjects, lbName string) string {
	t.Helper()
	for _, ps := range sim.Objects("httppolicyset") {
		if ps["name"] == lbName {
			policy, _ := ps["http_request_policy"].(map[string]any)
			b, err := json.Marshal(policy["rules"]) // map keys sorted
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
	t.Fatalf("no HTTP policy set %s", lbName)
	return ""
}
