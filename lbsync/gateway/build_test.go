package gateway

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nodeportlocal/npl/lbmodel"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestBuildModel checks a whole model: HTTP and HTTPS listeners, host
// intersection, ports per listener, weighted pools, order and certificates.
func TestBuildModel(t *testing.T) {
	cert := newCert(t, "*.example.com")
	gw := gateway(httpL("http", 80, ""), httpsL("https", 443, "*.example.com", secretRef("", "tls")))
	old := route("old", 100, hostnames("shop.example.com"),
		rule([]gatewayv1.HTTPRouteMatch{exactM("/a")}, svcRef("a", 1)),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/b/")}, svcRef("a", 1), svcRef("b", 1)))
	newer := route("new", 200, rule([]gatewayv1.HTTPRouteMatch{exactM("/a")}, svcRef("b", 1)))
	res := Build(Input{
		ClusterName: testCluster, Gateway: gw, Routes: []*gatewayv1.HTTPRoute{newer, old},
		Services: []*corev1.Service{service(appNS, "a"), service(appNS, "b")},
		Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), pod(appNS, "b", "b-1", "198.18.0.2", 61001),
			pod(appNS, "b", "b-2", "198.18.0.3", 61002)},
		Secrets: []*corev1.Secret{cert.secret(infraNS, "tls")},
	})
	if len(res.Report.Errors) > 0 {
		t.Fatalf("errors: %v", res.Report.Errors)
	}
	want := &lbmodel.LoadBalancer{
		Name: lbName, Kind: lbmodel.L7, Gateway: infraNS + "/gw",
		Listeners: []lbmodel.Listener{{Port: 80, Protocol: lbmodel.HTTP}, {Port: 443, Protocol: lbmodel.HTTPS}},
		Pools: []lbmodel.Pool{
			{Name: poolName("new", 0), Members: []lbmodel.Member{up("198.18.0.2", 61001, 0), up("198.18.0.3", 61002, 0)}},
			{Name: poolName("old", 0), Members: []lbmodel.Member{up("198.18.0.1", 61000, 0)}},
			// a has one Pod, b two: a's Pod gets half the requests.
			{Name: poolName("old", 1), Members: []lbmodel.Member{up("198.18.0.1", 61000, 2), up("198.18.0.2", 61001, 1), up("198.18.0.3", 61002, 1)}},
		},
		HTTP: &lbmodel.HTTPRoutes{
			Rules: []lbmodel.Rule{
				{Host: "shop.example.com", Path: "/a", PathType: lbmodel.PathExact, Pool: poolName("old", 0), Ports: []int32{80, 443}, Order: 0},
				{Host: "shop.example.com", Path: "/b", PathType: lbmodel.PathPrefix, Pool: poolName("old", 1), Ports: []int32{80, 443}, Order: 1},
				{Host: "*.example.com", Path: "/a", PathType: lbmodel.PathExact, Pool: poolName("new", 0), Ports: []int32{443}, Order: 2},
				{Path: "/a", PathType: lbmodel.PathExact, Pool: poolName("new", 0), Ports: []int32{80}, Order: 2},
			},
			TLS: []lbmodel.TLSCert{{Secret: infraNS + "/tls", Hosts: []string{"*.example.com"}, Ports: []int32{443},
				Fingerprint: lbmodel.CertFingerprint(cert.certPEM), CertPEM: cert.certPEM, KeyPEM: cert.keyPEM}},
		},
	}
	if diff := cmp.Diff(want, res.LB, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("model (-want +got):\n%s", diff)
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Errorf("the model does not pass Normalize: %v", err)
	}
	if diff := cmp.Diff([]ServiceRef{{appNS, "a"}, {appNS, "b"}}, res.Backends); diff != "" {
		t.Errorf("backends (-want +got):\n%s", diff)
	}
	// A Service's LoadBalancerPolicy reaches the pools whose only backend it is.
	wantPools := map[string][]string{poolName("new", 0): {appNS + "/b"}, poolName("old", 0): {appNS + "/a"}, poolName("old", 1): {appNS + "/a", appNS + "/b"}}
	if diff := cmp.Diff(wantPools, res.Report.PoolBackends); diff != "" {
		t.Errorf("pool backends (-want +got):\n%s", diff)
	}
	for _, l := range res.Listeners {
		if l.Status.AttachedRoutes != 2 || !l.Served {
			t.Errorf("listener %s: attached %d served %v, want 2 and served", l.Status.Name, l.Status.AttachedRoutes, l.Served)
		}
	}
	if res.Accepted.Status != metav1.ConditionTrue || res.Accepted.ObservedGeneration != 3 {
		t.Errorf("Accepted = %+v", res.Accepted)
	}
}

func TestIntersect(t *testing.T) {
	tests := []struct {
		listener string
		route    []gatewayv1.Hostname
		want     []string
	}{
		{"", nil, []string{""}},
		{"", []gatewayv1.Hostname{"a.example.com"}, []string{"a.example.com"}},
		{"a.example.com", nil, []string{"a.example.com"}},
		{"*.example.com", []gatewayv1.Hostname{"a.example.com", "a.b.example.com", "example.com", "other.org"}, []string{"a.example.com", "a.b.example.com"}},
		{"a.example.com", []gatewayv1.Hostname{"*.example.com"}, []string{"a.example.com"}},
		{"*.example.com", []gatewayv1.Hostname{"*.example.com", "*.b.example.com"}, []string{"*.example.com", "*.b.example.com"}},
		{"*.b.example.com", []gatewayv1.Hostname{"*.example.com"}, []string{"*.b.example.com"}},
		{"a.example.com", []gatewayv1.Hostname{"b.example.com"}, nil},
		{"a.example.com", []gatewayv1.Hostname{"A.Example.com"}, []string{"a.example.com"}},
	}
	for _, tt := range tests {
		if got := intersect(tt.listener, tt.route); !cmp.Equal(tt.want, got, cmpopts.EquateEmpty()) {
			t.Errorf("intersect(%q, %v) = %v, want %v", tt.listener, tt.route, got, tt.want)
		}
	}
}

// TestListenerStatus checks the listener conditions the conformance suite
// expects for invalid listeners.
func TestListenerStatus(t *testing.T) {
	cert := newCert(t, "example.com")
	secrets := []*corev1.Secret{cert.secret(infraNS, "tls"), cert.secret("certs", "other"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: infraNS, Name: "bad"}, Data: map[string][]byte{corev1.TLSCertKey: []byte("x"), corev1.TLSPrivateKeyKey: []byte("y")}}}
	grant := &gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "certs", Name: "g"}, Spec: gatewayv1.ReferenceGrantSpec{
		From: []gatewayv1.ReferenceGrantFrom{{Group: Group, Kind: KindGateway, Namespace: infraNS}},
		To:   []gatewayv1.ReferenceGrantTo{{Group: "", Kind: KindSecret}}}}
	tcp := httpL("tcp", 9000, "")
	tcp.Protocol = "example.com/sctp"
	kinds := httpL("kinds", 81, "")
	kinds.AllowedRoutes.Kinds = []gatewayv1.RouteGroupKind{{Kind: "TCPRoute"}}
	mixed := httpL("mixed", 82, "")
	mixed.AllowedRoutes.Kinds = []gatewayv1.RouteGroupKind{{Kind: "TCPRoute"}, {Kind: KindHTTPRoute}}
	badGroup := secretRef("", "tls")
	badGroup.Group = ptr(gatewayv1.Group("example.org"))
	tests := []struct {
		name     string
		l        gatewayv1.Listener
		grants   []*gatewayv1.ReferenceGrant
		want     map[string]string // condition type -> reason
		served   bool
		kindsLen int
	}{
		{"http", httpL("l", 80, ""), nil, map[string]string{"Accepted": "Accepted", "ResolvedRefs": "ResolvedRefs", "Conflicted": "NoConflicts"}, true, 2},
		{"unsupported protocol", tcp, nil, map[string]string{"Accepted": "UnsupportedProtocol"}, false, 0},
		{"invalid route kinds", kinds, nil, map[string]string{"Accepted": "Accepted", "ResolvedRefs": "InvalidRouteKinds"}, false, 0},
		{"some invalid route kinds", mixed, nil, map[string]string{"ResolvedRefs": "InvalidRouteKinds"}, true, 1},
		{"https", httpsL("l", 443, "", secretRef("", "tls")), nil, map[string]string{"ResolvedRefs": "ResolvedRefs"}, true, 2},
		{"missing secret", httpsL("l", 443, "", secretRef("", "nope")), nil, map[string]string{"Accepted": "Accepted", "ResolvedRefs": "InvalidCertificateRef"}, false, 2},
		{"forbidden secret", httpsL("l", 443, "", secretRef("", "hidden")), nil, map[string]string{"Accepted": "Accepted", "ResolvedRefs": "InvalidCertificateRef"}, false, 2},
		{"malformed secret", httpsL("l", 443, "", secretRef("", "bad")), nil, map[string]string{"ResolvedRefs": "InvalidCertificateRef"}, false, 2},
		{"not a secret", httpsL("l", 443, "", badGroup), nil, map[string]string{"ResolvedRefs": "InvalidCertificateRef"}, false, 2},
		{"other namespace without grant", httpsL("l", 443, "", secretRef("certs", "other")), nil, map[string]string{"ResolvedRefs": "RefNotPermitted"}, false, 2},
		{"other namespace with grant", httpsL("l", 443, "", secretRef("certs", "other")), []*gatewayv1.ReferenceGrant{grant}, map[string]string{"ResolvedRefs": "ResolvedRefs"}, true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Build(Input{ClusterName: testCluster, Gateway: gateway(tt.l), Secrets: secrets, ReferenceGrants: tt.grants,
				ForbiddenSecrets: []string{infraNS + "/hidden"}})
			if len(res.Listeners) != 1 {
				t.Fatalf("%d listener statuses", len(res.Listeners))
			}
			l := res.Listeners[0]
			for typ, reason := range tt.want {
				if c := cond(l.Status.Conditions, typ); c.Reason != reason || c.ObservedGeneration != 3 {
					t.Errorf("%s = %s (generation %d), want %s", typ, c.Reason, c.ObservedGeneration, reason)
				}
			}
			if l.Served != tt.served || len(l.Status.SupportedKinds) != tt.kindsLen {
				t.Errorf("served %v kinds %v, want %v and %d kinds", l.Served, l.Status.SupportedKinds, tt.served, tt.kindsLen)
			}
			// Only a Secret that does not exist is looked for again; one
			// npl-lbsync may not read says so and is not polled.
			if res.MissingSecrets != (tt.name == "missing secret") {
				t.Errorf("MissingSecrets %v", res.MissingSecrets)
			}
			if c := cond(l.Status.Conditions, "ResolvedRefs"); (tt.name == "forbidden secret") != strings.Contains(c.Message, "may not read") {
				t.Errorf("ResolvedRefs message %q", c.Message)
			}
			if (res.LB != nil) != tt.served {
				t.Errorf("model %v, want one: %v", res.LB != nil, tt.served)
			}
		})
	}
}

func TestGatewayAccepted(t *testing.T) {
	tcp := httpL("tcp", 9000, "")
	tcp.Protocol = "example.com/sctp"
	tests := []struct {
		name   string
		gw     *gatewayv1.Gateway
		status metav1.ConditionStatus
		reason string
	}{
		{"valid", gateway(httpL("a", 80, "")), metav1.ConditionTrue, "Accepted"},
		{"some invalid", gateway(httpL("a", 80, ""), tcp), metav1.ConditionTrue, "ListenersNotValid"},
		{"none valid", gateway(tcp), metav1.ConditionFalse, "ListenersNotValid"},
		{"hostname address", func() *gatewayv1.Gateway {
			g := gateway(httpL("a", 80, ""))
			g.Spec.Addresses = []gatewayv1.GatewaySpecAddress{{Type: ptr(gatewayv1.HostnameAddressType), Value: "lb.example.com"}}
			return g
		}(), metav1.ConditionFalse, "UnsupportedAddress"},
	}
	for _, tt := range tests {
		res := Build(Input{ClusterName: testCluster, Gateway: tt.gw})
		if res.Accepted.Status != tt.status || res.Accepted.Reason != tt.reason {
			t.Errorf("%s: Accepted %s/%s, want %s/%s", tt.name, res.Accepted.Status, res.Accepted.Reason, tt.status, tt.reason)
		}
		if (res.LB != nil) != (tt.status == metav1.ConditionTrue) {
			t.Errorf("%s: model %v", tt.name, res.LB != nil)
		}
	}
	g := gateway(httpL("a", 80, ""))
	g.Spec.Addresses = []gatewayv1.GatewaySpecAddress{{Type: ptr(gatewayv1.IPAddressType), Value: "198.18.5.5"}}
	if res := Build(Input{ClusterName: testCluster, Gateway: g}); res.LB == nil || res.LB.RequestedVIP != "198.18.5.5" {
		t.Errorf("requested address not in the model: %+v", res.LB)
	}
}

func TestConflicts(t *testing.T) {
	https := httpsL("c", 80, "", secretRef("", "tls"))
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("a", 80, "x.example.com"), httpL("b", 80, "x.example.com"),
		httpL("d", 81, ""), httpL("e", 82, ""), func() gatewayv1.Listener { h := https; h.Port = 82; return h }())})
	want := map[string]string{"a": "HostnameConflict", "b": "HostnameConflict", "d": "NoConflicts", "e": "ProtocolConflict", "c": "ProtocolConflict"}
	for _, l := range res.Listeners {
		if got := cond(l.Status.Conditions, "Conflicted").Reason; got != want[string(l.Status.Name)] {
			t.Errorf("listener %s: Conflicted %s, want %s", l.Status.Name, got, want[string(l.Status.Name)])
		}
	}
	if res.LB == nil || len(res.LB.Listeners) != 1 || res.LB.Listeners[0].Port != 81 {
		t.Errorf("only port 81 should be served: %+v", res.LB)
	}
}

// TestRouteParents checks the parent statuses of routes.
func TestRouteParents(t *testing.T) {
	same := httpL("same", 80, "")
	same.AllowedRoutes = nil // Same namespace only
	gw := gateway(httpL("http", 80, "a.example.com"), same)
	cross := svcRef("x", 1)
	cross.Namespace = ptr(gatewayv1.Namespace("other"))
	badKind := svcRef("x", 1)
	badKind.Kind = ptr(gatewayv1.Kind("Pod"))
	tests := []struct {
		name            string
		route           *gatewayv1.HTTPRoute
		accepted        string
		resolved        string
		attachedHTTP    int32
		fixed500, hasLB bool
	}{
		{"accepted", route("r", 1, rule(nil, svcRef("a", 1))), "Accepted", "ResolvedRefs", 1, false, true},
		{"no section", route("r", 1, parent(gatewayv1.ParentReference{Name: "gw", Namespace: ptr(gatewayv1.Namespace(infraNS)),
			SectionName: ptr(gatewayv1.SectionName("nope"))}), rule(nil, svcRef("a", 1))), "NoMatchingParent", "ResolvedRefs", 0, false, false},
		{"no port", route("r", 1, parent(gatewayv1.ParentReference{Name: "gw", Namespace: ptr(gatewayv1.Namespace(infraNS)),
			Port: ptr(gatewayv1.PortNumber(81))}), rule(nil, svcRef("a", 1))), "NoMatchingParent", "ResolvedRefs", 0, false, false},
		{"not allowed", route("r", 1, parent(gatewayv1.ParentReference{Name: "gw", Namespace: ptr(gatewayv1.Namespace(infraNS)),
			SectionName: ptr(gatewayv1.SectionName("same"))}), rule(nil, svcRef("a", 1))), "NotAllowedByListeners", "ResolvedRefs", 0, false, false},
		{"no hostname", route("r", 1, hostnames("b.example.com"), parent(gatewayv1.ParentReference{Name: "gw",
			Namespace: ptr(gatewayv1.Namespace(infraNS)), SectionName: ptr(gatewayv1.SectionName("http"))}), rule(nil, svcRef("a", 1))),
			"NoMatchingListenerHostname", "ResolvedRefs", 0, false, false},
		{"missing backend", route("r", 1, rule(nil, svcRef("nope", 1))), "Accepted", "BackendNotFound", 1, true, true},
		{"invalid kind", route("r", 1, rule(nil, badKind)), "Accepted", "InvalidKind", 1, true, true},
		{"cross namespace", route("r", 1, rule(nil, cross)), "Accepted", "RefNotPermitted", 1, true, true},
		{"no backendRefs", route("r", 1, rule(nil)), "Accepted", "ResolvedRefs", 1, true, true},
		{"unsupported filter", route("r", 1, rule(nil, svcRef("a", 1)), withFilter(gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestMirror})),
			"UnsupportedValue", "ResolvedRefs", 1, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Build(Input{ClusterName: testCluster, Gateway: gw, Routes: []*gatewayv1.HTTPRoute{tt.route},
				Services: []*corev1.Service{service(appNS, "a"), service("other", "x")}})
			if len(res.Routes) != 1 || len(res.Routes[0].Parents) != 1 {
				t.Fatalf("routes %+v", res.Routes)
			}
			p := res.Routes[0].Parents[0]
			if p.ControllerName != ControllerName || *p.ParentRef.Group != Group || *p.ParentRef.Kind != KindGateway || p.ParentRef.Name != "gw" {
				t.Errorf("parent %+v", p)
			}
			if c := cond(p.Conditions, "Accepted"); c.Reason != tt.accepted || c.ObservedGeneration != 2 {
				t.Errorf("Accepted %s (generation %d), want %s", c.Reason, c.ObservedGeneration, tt.accepted)
			}
			if c := cond(p.Conditions, "ResolvedRefs"); c.Reason != tt.resolved {
				t.Errorf("ResolvedRefs %s, want %s", c.Reason, tt.resolved)
			}
			if got := res.Listeners[0].Status.AttachedRoutes; got != tt.attachedHTTP {
				t.Errorf("attached routes %d, want %d", got, tt.attachedHTTP)
			}
			var rules []lbmodel.Rule
			if res.LB != nil {
				// Route rules only: the listener isolation rule of
				// a.example.com is TestListenerIsolation's.
				for _, r := range res.LB.HTTP.Rules {
					if r.Order != isolationOrder {
						rules = append(rules, r)
					}
				}
			}
			if (len(rules) > 0) != tt.hasLB {
				t.Fatalf("rules %+v, want some: %v", rules, tt.hasLB)
			}
			if tt.hasLB && (rules[0].FixedStatus == 500) != tt.fixed500 {
				t.Errorf("rule %+v: want a fixed 500: %v", rules[0], tt.fixed500)
			}

		})
	}
}

func TestCrossNamespaceBackendWithGrant(t *testing.T) {
	cross := svcRef("x", 1)
	cross.Namespace = ptr(gatewayv1.Namespace("other"))
	grant := &gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "g"}, Spec: gatewayv1.ReferenceGrantSpec{
		From: []gatewayv1.ReferenceGrantFrom{{Group: Group, Kind: KindHTTPRoute, Namespace: appNS}},
		To:   []gatewayv1.ReferenceGrantTo{{Group: "", Kind: KindService, Name: ptr(gatewayv1.ObjectName("x"))}}}}
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), ReferenceGrants: []*gatewayv1.ReferenceGrant{grant},
		Routes: []*gatewayv1.HTTPRoute{route("r", 1, rule(nil, cross))}, Services: []*corev1.Service{service("other", "x")},
		Pods: []*corev1.Pod{pod("other", "x", "x-1", "198.18.0.9", 61009)}})
	if c := cond(res.Routes[0].Parents[0].Conditions, "ResolvedRefs"); c.Status != metav1.ConditionTrue {
		t.Fatalf("ResolvedRefs %+v", c)
	}
	want := []lbmodel.Pool{{Name: poolName("r", 0), Members: []lbmodel.Member{up("198.18.0.9", 61009, 0)}}}
	if diff := cmp.Diff(want, res.LB.Pools); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
}

func TestFiltersAndMatches(t *testing.T) {
	status := 301
	rt := route("r", 1,
		rule([]gatewayv1.HTTPRouteMatch{{
			Path:        &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchRegularExpression), Value: ptr("/v[0-9]+/.*")},
			Method:      ptr(gatewayv1.HTTPMethodPost),
			Headers:     []gatewayv1.HTTPHeaderMatch{{Name: "X-Env", Value: "prod"}},
			QueryParams: []gatewayv1.HTTPQueryParamMatch{{Type: ptr(gatewayv1.QueryParamMatchRegularExpression), Name: "q", Value: "a.*"}},
		}}, svcRef("a", 1)),
		withFilter(gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier,
			RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "X-A", Value: "1"}}, Remove: []string{"X-B"}}}),
		withFilter(gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterURLRewrite,
			URLRewrite: &gatewayv1.HTTPURLRewriteFilter{Hostname: ptr(gatewayv1.PreciseHostname("in.example.com")),
				Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.FullPathHTTPPathModifier, ReplaceFullPath: ptr("/new")}}}),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/old")}),
		withFilter(gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestRedirect,
			RequestRedirect: &gatewayv1.HTTPRequestRedirectFilter{Scheme: ptr("https"), StatusCode: &status}}),
		rule([]gatewayv1.HTTPRouteMatch{prefixM("/p")}, svcRef("a", 1)),
		withFilter(gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterURLRewrite,
			URLRewrite: &gatewayv1.HTTPURLRewriteFilter{
				Path: &gatewayv1.HTTPPathModifier{Type: gatewayv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr("/new")}}}),
	)
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{rt},
		Services: []*corev1.Service{service(appNS, "a")}})
	want := []lbmodel.Rule{
		{Path: "/old", PathType: lbmodel.PathPrefix, Ports: []int32{80}, Order: 1,
			Redirect: &lbmodel.Redirect{Scheme: "https", Port: 443, StatusCode: 301}},
		{Path: "/v[0-9]+/.*", PathType: lbmodel.PathRegex, Pool: poolName("r", 0), Ports: []int32{80}, Method: "POST",
			Headers:        []lbmodel.ValueMatch{{Name: "X-Env", Value: "prod"}},
			Query:          []lbmodel.ValueMatch{{Name: "q", Value: "a.*", Regex: true}},
			RequestHeaders: &lbmodel.HeaderFilter{Set: []lbmodel.Header{{Name: "X-A", Value: "1"}}, Remove: []string{"X-B"}},
			Rewrite:        &lbmodel.Rewrite{Hostname: "in.example.com", Path: &lbmodel.PathModifier{Type: lbmodel.ReplaceFullPath, Value: "/new"}}},
		{Path: "/p", PathType: lbmodel.PathPrefix, Pool: poolName("r", 2), Ports: []int32{80}, Order: 2,
			Rewrite: &lbmodel.Rewrite{Path: &lbmodel.PathModifier{Type: lbmodel.ReplacePrefixMatch, Value: "/new"}}},
	}
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	if diff := cmp.Diff(want, res.LB.HTTP.Rules, cmpopts.EquateEmpty(),
		cmpopts.SortSlices(func(a, b lbmodel.Rule) bool { return a.Path < b.Path })); diff != "" {
		t.Errorf("rules (-want +got):\n%s\nerrors %v", diff, res.Report.Errors)
	}
}

// TestOlderRouteWins: two routes match the same requests; the older one's
// rule stays.
func TestOlderRouteWins(t *testing.T) {
	a := route("a", 200, rule([]gatewayv1.HTTPRouteMatch{exactM("/x")}, svcRef("a", 1)))
	b := route("b", 100, rule([]gatewayv1.HTTPRouteMatch{exactM("/x")}, svcRef("a", 1)))
	res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Routes: []*gatewayv1.HTTPRoute{a, b},
		Services: []*corev1.Service{service(appNS, "a")}})
	if got := res.LB.HTTP.Rules; len(got) != 1 || got[0].Pool != poolName("b", 0) {
		t.Errorf("rules %+v, want route b's only", got)
	}
}

// TestWeights: a rule's backendRefs share its requests by weight: each
// valid backend's share spread over its members, the share of the invalid
// ones answered 500 (InvalidWeight), all scaled to 1-256 and reduced by
// their greatest common divisor.
func TestWeights(t *testing.T) {
	pods := []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), pod(appNS, "b", "b-1", "198.18.0.2", 61001),
		pod(appNS, "b", "b-2", "198.18.0.3", 61002)}
	svcs := []*corev1.Service{service(appNS, "a"), service(appNS, "b"), service(appNS, "empty")}
	badPort := svcRef("a", 1)
	badPort.Port = ptr(gatewayv1.PortNumber(81))
	a, b1, b2 := up("198.18.0.1", 61000, 0), up("198.18.0.2", 61001, 0), up("198.18.0.3", 61002, 0)
	weight := func(m lbmodel.Member, w int32) lbmodel.Member { m.Weight = w; return m }
	tests := []struct {
		name    string
		refs    []gatewayv1.HTTPBackendRef
		want    []lbmodel.Member
		invalid int32
		fix     bool
	}{
		{"equal", []gatewayv1.HTTPBackendRef{svcRef("a", 5), svcRef("b", 10)}, []lbmodel.Member{a, b1, b2}, 0, false},
		{"7 to 3", []gatewayv1.HTTPBackendRef{svcRef("a", 7), svcRef("b", 6)}, []lbmodel.Member{weight(a, 128), weight(b1, 55), weight(b2, 55)}, 0, false},
		{"zero weight", []gatewayv1.HTTPBackendRef{svcRef("a", 1), svcRef("b", 0)}, []lbmodel.Member{a}, 0, false},
		{"all zero", []gatewayv1.HTTPBackendRef{svcRef("a", 0)}, nil, 0, true},
		{"all invalid", []gatewayv1.HTTPBackendRef{svcRef("nope", 1), badPort}, nil, 0, true},
		{"invalid and zero", []gatewayv1.HTTPBackendRef{svcRef("nope", 1), svcRef("a", 0)}, nil, 0, true},
		// The invalid share is one more backend of one member.
		{"valid 1 to invalid 1", []gatewayv1.HTTPBackendRef{svcRef("a", 1), svcRef("nope", 1)}, []lbmodel.Member{a}, 1, false},
		{"valid 7 to invalid 3", []gatewayv1.HTTPBackendRef{svcRef("a", 7), svcRef("nope", 3)}, []lbmodel.Member{weight(a, 128)}, 55, false},
		{"invalid 3 to valid 1", []gatewayv1.HTTPBackendRef{svcRef("nope", 3), svcRef("a", 1)}, []lbmodel.Member{weight(a, 85)}, 256, false},
		// Invalid backendRefs of any reason add up: 2 of 4 answer 500.
		{"invalid ones add up", []gatewayv1.HTTPBackendRef{svcRef("a", 2), svcRef("nope", 1), badPort}, []lbmodel.Member{a}, 1, false},
		// b's two Pods share b's half; the invalid half is worth two.
		{"spread over members", []gatewayv1.HTTPBackendRef{svcRef("b", 1), svcRef("nope", 1)}, []lbmodel.Member{weight(b1, 1), weight(b2, 1)}, 2, false},
		{"invalid of weight 0", []gatewayv1.HTTPBackendRef{svcRef("a", 1), svcRef("nope", 0)}, []lbmodel.Member{a}, 0, false},
		// A backend without ready Pods has no share, as among valid
		// backends: its requests go to the others, the invalid share
		// included; alone with invalid ones, every request gets 500.
		{"no Pods and invalid", []gatewayv1.HTTPBackendRef{svcRef("empty", 1), svcRef("nope", 1)}, nil, 1, false},
		{"no Pods, valid and invalid", []gatewayv1.HTTPBackendRef{svcRef("empty", 5), svcRef("a", 1), svcRef("nope", 1)}, []lbmodel.Member{a}, 1, false},
		{"no Pods", []gatewayv1.HTTPBackendRef{svcRef("empty", 1)}, nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Build(Input{ClusterName: testCluster, Gateway: gateway(httpL("http", 80, "")), Services: svcs, Pods: pods,
				Routes: []*gatewayv1.HTTPRoute{route("r", 1, rule(nil, tt.refs...))}})
			if tt.fix {
				if len(res.LB.Pools) != 0 || res.LB.HTTP.Rules[0].FixedStatus != 500 {
					t.Errorf("want a fixed 500 and no pool: %+v", res.LB)
				}
				return
			}
			if len(res.LB.Pools) != 1 || res.LB.HTTP.Rules[0].Pool != res.LB.Pools[0].Name {
				t.Fatalf("want the rule's pool: %+v", res.LB)
			}
			want := lbmodel.Pool{Name: poolName("r", 0), Members: tt.want, InvalidWeight: tt.invalid}
			if diff := cmp.Diff(want, res.LB.Pools[0], cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("pool (-want +got):\n%s", diff)
			}
			if _, err := lbmodel.Normalize(res.LB); err != nil {
				t.Errorf("the model does not pass Normalize: %v", err)
			}
		})
	}
}

// TestListenerIsolation: a request for a listener's hostname never reaches
// the routes of a less specific listener on the same port (the
// conformance test GatewayHTTPListenerIsolation's listeners).
func TestListenerIsolation(t *testing.T) {
	gw := gateway(httpL("empty", 80, ""), httpL("wild", 80, "*.example.com"), httpL("wildfoo", 80, "*.foo.example.com"),
		httpL("abc", 80, "abc.foo.example.com"), httpL("other-port", 8080, "x.example.com"))
	res := Build(Input{ClusterName: testCluster, Gateway: gw})
	catchAll := func(host string) lbmodel.Rule {
		return lbmodel.Rule{Host: host, Path: "/", PathType: lbmodel.PathPrefix, FixedStatus: 404, Ports: []int32{80}, Order: isolationOrder}
	}
	want := []lbmodel.Rule{catchAll("abc.foo.example.com"), catchAll("*.foo.example.com"), catchAll("*.example.com")}
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	if diff := cmp.Diff(want, res.LB.HTTP.Rules, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}

	// A route's own "/" on the listener replaces the 404 rule.
	rt := route("r", 1, parent(gatewayv1.ParentReference{Name: "gw", Namespace: ptr(gatewayv1.Namespace(infraNS)),
		SectionName: ptr(gatewayv1.SectionName("abc"))}), rule(nil, svcRef("a", 1)))
	res = Build(Input{ClusterName: testCluster, Gateway: gw, Routes: []*gatewayv1.HTTPRoute{rt}, Services: []*corev1.Service{service(appNS, "a")}})
	for _, r := range res.LB.HTTP.Rules {
		if r.Host == "abc.foo.example.com" && (r.FixedStatus != 0 || r.Pool != poolName("r", 0)) {
			t.Errorf("rule %+v: want the route's", r)
		}
	}
}

// TestListenerIsolationIntersection: a route's hostnames that a more
// specific listener of the port takes give no rule on its less specific
// listener (GatewayHTTPListenerIsolation with hostname intersection).
func TestListenerIsolationIntersection(t *testing.T) {
	gw := gateway(httpL("empty", 80, ""), httpL("wild", 80, "*.example.com"), httpL("abc", 80, "abc.foo.example.com"))
	section := func(name string) routeMod {
		return parent(gatewayv1.ParentReference{Name: "gw", Namespace: ptr(gatewayv1.Namespace(infraNS)), SectionName: ptr(gatewayv1.SectionName(name))})
	}
	all := hostnames("bar.com", "*.example.com", "abc.foo.example.com")
	routes := []*gatewayv1.HTTPRoute{
		route("to-empty", 1, all, section("empty"), rule([]gatewayv1.HTTPRouteMatch{prefixM("/empty")}, svcRef("a", 1))),
		route("to-wild", 2, all, section("wild"), rule([]gatewayv1.HTTPRouteMatch{prefixM("/wild")}, svcRef("a", 1))),
		route("to-abc", 3, all, section("abc"), rule([]gatewayv1.HTTPRouteMatch{prefixM("/abc")}, svcRef("a", 1))),
	}
	res := Build(Input{ClusterName: testCluster, Gateway: gw, Routes: routes, Services: []*corev1.Service{service(appNS, "a")}})
	got := map[string][]string{}
	for _, r := range res.LB.HTTP.Rules {
		got[r.Host] = append(got[r.Host], r.Path)
	}
	want := map[string][]string{
		"bar.com":             {"/empty"},
		"*.example.com":       {"/wild", "/"},
		"abc.foo.example.com": {"/abc", "/"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("paths by host (-want +got):\n%s", diff)
	}
	for _, l := range res.Listeners {
		if l.Status.AttachedRoutes != 1 {
			t.Errorf("listener %s: %d attached routes, want 1", l.Status.Name, l.Status.AttachedRoutes)
		}
	}
}

// The pools of routes of different namespaces on one Gateway never share
// a name: a/b-shop and a-b/shop both were <lb>-a-b-shop-R0, so that one
// route's requests went to the other's Pods (and, in one age order, an
// invalid rule of one removed the other's pool and the Gateway was
// refused whole).
func TestBuild_routePoolsOfCollidingNamesStayApart(t *testing.T) {
	gw := gateway(httpL("http", 80, ""))
	attacker := route("b-shop", 100, hostnames("b.example.com"), rule([]gatewayv1.HTTPRouteMatch{prefixM("/")}, svcRef("web", 1)))
	attacker.Namespace = "a"
	victim := route("shop", 200, hostnames("shop.example.com"), rule([]gatewayv1.HTTPRouteMatch{prefixM("/")}, svcRef("web", 1)))
	victim.Namespace = "a-b"
	res := Build(Input{
		ClusterName: testCluster, Gateway: gw, Routes: []*gatewayv1.HTTPRoute{attacker, victim},
		Services: []*corev1.Service{service("a", "web"), service("a-b", "web")},
		Pods:     []*corev1.Pod{pod("a", "web", "web-1", "198.18.0.1", 61000), pod("a-b", "web", "web-1", "198.18.0.2", 61000)},
	})
	if len(res.Report.Errors) > 0 {
		t.Fatalf("errors: %v", res.Report.Errors)
	}
	first, second := lbmodel.GatewayPoolName(lbName, "a", "b-shop", 0), lbmodel.GatewayPoolName(lbName, "a-b", "shop", 0)
	want := []lbmodel.Pool{
		{Name: second, Members: []lbmodel.Member{up("198.18.0.2", 61000, 0)}},
		{Name: first, Members: []lbmodel.Member{up("198.18.0.1", 61000, 0)}},
	}
	if res.LB == nil {
		t.Fatal("no model")
	}
	if diff := cmp.Diff(want, res.LB.Pools, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
	for _, r := range res.LB.HTTP.Rules {
		if wantPool := map[string]string{"b.example.com": first, "shop.example.com": second}[r.Host]; r.Pool != wantPool {
			t.Errorf("rule %s%s: pool %s, want %s", r.Host, r.Path, r.Pool, wantPool)
		}
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Errorf("the model does not pass Normalize: %v", err)
	}
}

// An HTTPS port of Gateway listeners of several hostnames carries them,
// most specific first ("" for the listener without one), so that the
// provider answers 421 to a request whose Host another listener takes
// than its server name (the conformance test
// HTTPRouteHTTPSListenerDetectMisdirectedRequests's listeners). A port of
// one hostname, a listener not served, and HTTP ports carry none.
func TestBuild_httpsPortsCarryTheirListenersHostnames(t *testing.T) {
	cert := newCert(t, "*.example.org")
	tls := secretRef("", "tls")
	gw := gateway(httpsL("any", 443, "", tls), httpsL("second", 443, "second.example.org", tls),
		httpsL("wild", 443, "*.wildcard.org", tls), httpsL("fourth", 443, "fourth.wildcard.org", tls),
		httpsL("unserved", 443, "x.example.org", secretRef("", "missing")),
		httpsL("alone", 8443, "a.example.org", tls), httpL("http-a", 80, "a.example.org"), httpL("http-b", 80, ""))
	res := Build(Input{ClusterName: testCluster, Gateway: gw, Secrets: []*corev1.Secret{cert.secret(infraNS, "tls")}})
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	got := map[int32][]string{}
	for _, l := range res.LB.Listeners {
		got[l.Port] = l.Hostnames
	}
	want := map[int32][]string{80: nil, 443: {"fourth.wildcard.org", "second.example.org", "*.wildcard.org", ""}, 8443: nil}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hostnames by port (-want +got):\n%s", diff)
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Errorf("the model does not pass Normalize: %v", err)
	}
}
