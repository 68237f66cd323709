package gateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nodeportlocal/npl/lbmodel"
	corev1 "k8s.io/api/core/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func tlsPool(route string) string {
	return lbmodel.GatewayRoutePoolName(lbName, KindTLSRoute, appNS, route, 0)
}

// TestTLSRoutes: passthrough and terminating TLS listeners, SNI routes by
// the intersection of hostnames, the older route keeping a host.
func TestTLSRoutes(t *testing.T) {
	cert := newCert(t, "secure.example.com")
	gw := gateway(tlsL("pass", 443, "*.example.com", gatewayv1.TLSModePassthrough),
		tlsL("term", 8443, "secure.example.com", gatewayv1.TLSModeTerminate, secretRef("", "tls")))
	routes := []*gatewayv1.TLSRoute{
		tlsRoute("newer", 200, "pass", []string{"a.example.com", "b.example.com"}, ref("b", 80, 1)),
		tlsRoute("older", 100, "pass", []string{"a.example.com", "other.org", "*.example.com"}, ref("a", 80, 1)),
		tlsRoute("secure", 300, "term", []string{"secure.example.com"}, ref("a", 80, 1)),
	}
	res := Build(Input{ClusterName: testCluster, Gateway: gw, TLSRoutes: routes,
		Services: []*corev1.Service{service(appNS, "a"), service(appNS, "b")},
		Pods:     []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), pod(appNS, "b", "b-1", "198.18.0.2", 61001)},
		Secrets:  []*corev1.Secret{cert.secret(infraNS, "tls")}})
	if len(res.Report.Errors) > 0 {
		t.Fatalf("errors: %v", res.Report.Errors)
	}
	want := &lbmodel.LoadBalancer{
		Name: lbName, Kind: lbmodel.L7, Gateway: infraNS + "/gw",
		Listeners: []lbmodel.Listener{
			{Port: 443, Protocol: lbmodel.TLS, SNI: []lbmodel.SNIRoute{
				{Host: "a.example.com", Pool: tlsPool("older")}, {Host: "b.example.com", Pool: tlsPool("newer")},
				{Host: "*.example.com", Pool: tlsPool("older")}}},
			{Port: 8443, Protocol: lbmodel.TLS, Terminate: true, SNI: []lbmodel.SNIRoute{{Host: "secure.example.com", Pool: tlsPool("secure")}}},
		},
		Pools: []lbmodel.Pool{
			{Name: tlsPool("newer"), Members: []lbmodel.Member{up("198.18.0.2", 61001, 0)}},
			{Name: tlsPool("older"), Members: []lbmodel.Member{up("198.18.0.1", 61000, 0)}},
			{Name: tlsPool("secure"), Members: []lbmodel.Member{up("198.18.0.1", 61000, 0)}},
		},
		HTTP: &lbmodel.HTTPRoutes{TLS: []lbmodel.TLSCert{{Secret: infraNS + "/tls", Hosts: []string{"secure.example.com"}, Ports: []int32{8443},
			Fingerprint: lbmodel.CertFingerprint(cert.certPEM), CertPEM: cert.certPEM, KeyPEM: cert.keyPEM}}},
	}
	if diff := cmp.Diff(want, res.LB, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("model (-want +got):\n%s", diff)
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Errorf("the model does not pass Normalize: %v", err)
	}
	for _, l := range res.Listeners {
		want := []gatewayv1.RouteGroupKind{{Group: ptr(gatewayv1.Group(Group)), Kind: KindTLSRoute}}
		if diff := cmp.Diff(want, l.Status.SupportedKinds); diff != "" || !l.Served {
			t.Errorf("listener %s: served %v, supported kinds (-want +got):\n%s", l.Status.Name, l.Served, diff)
		}
	}
	if got := listenerResult(t, res, "pass").Status.AttachedRoutes; got != 2 {
		t.Errorf("pass: %d attached routes, want 2", got)
	}
}

// TestTLSListenerStatus checks the listener conditions of the TLSRoute
// conformance tests.
func TestTLSListenerStatus(t *testing.T) {
	cert := newCert(t, "example.com")
	onlyTCP := tlsL("kinds", 443, "", gatewayv1.TLSModePassthrough)
	onlyTCP.AllowedRoutes.Kinds = []gatewayv1.RouteGroupKind{{Kind: KindTCPRoute}}
	someTCP := tlsL("kinds", 443, "", gatewayv1.TLSModePassthrough)
	someTCP.AllowedRoutes.Kinds = []gatewayv1.RouteGroupKind{{Kind: KindTLSRoute}, {Kind: KindTCPRoute}}
	tests := []struct {
		name      string
		listeners []gatewayv1.Listener
		want      map[string]map[string]string // listener -> condition type -> reason
		kinds     int
	}{
		{"passthrough", []gatewayv1.Listener{tlsL("p", 443, "", gatewayv1.TLSModePassthrough)},
			map[string]map[string]string{"p": {"Accepted": "Accepted", "ResolvedRefs": "ResolvedRefs"}}, 1},
		{"terminate", []gatewayv1.Listener{tlsL("t", 443, "", gatewayv1.TLSModeTerminate, secretRef("", "tls"))},
			map[string]map[string]string{"t": {"Accepted": "Accepted", "ResolvedRefs": "ResolvedRefs"}}, 1},
		{"terminate without certificate", []gatewayv1.Listener{tlsL("t", 443, "", gatewayv1.TLSModeTerminate, secretRef("", "nope"))},
			map[string]map[string]string{"t": {"Accepted": "Accepted", "ResolvedRefs": "InvalidCertificateRef"}}, 1},
		{"mixed termination", []gatewayv1.Listener{tlsL("t", 8443, "t.example.com", gatewayv1.TLSModeTerminate, secretRef("", "tls")),
			tlsL("p", 8443, "p.example.com", gatewayv1.TLSModePassthrough)},
			map[string]map[string]string{"t": {"Accepted": "ProtocolConflict"}, "p": {"Accepted": "ProtocolConflict"}}, 0},
		{"TCPRoute only", []gatewayv1.Listener{onlyTCP}, map[string]map[string]string{"kinds": {"ResolvedRefs": "InvalidRouteKinds"}}, 0},
		{"TLSRoute and TCPRoute", []gatewayv1.Listener{someTCP}, map[string]map[string]string{"kinds": {"ResolvedRefs": "InvalidRouteKinds"}}, 1},
		{"HTTPS and TLS on one port", []gatewayv1.Listener{httpsL("s", 443, "", secretRef("", "tls")), tlsL("p", 443, "p.example.com", gatewayv1.TLSModePassthrough)},
			map[string]map[string]string{"s": {"Conflicted": "ProtocolConflict"}, "p": {"Conflicted": "ProtocolConflict"}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Build(Input{ClusterName: testCluster, Gateway: gateway(tt.listeners...), Secrets: []*corev1.Secret{cert.secret(infraNS, "tls")}})
			for name, conds := range tt.want {
				l := listenerResult(t, res, name)
				for typ, reason := range conds {
					if c := cond(l.Status.Conditions, typ); c.Reason != reason {
						t.Errorf("listener %s: %s %s, want %s", name, typ, c.Reason, reason)
					}
				}
				if name != "s" && len(l.Status.SupportedKinds) != tt.kinds {
					t.Errorf("listener %s: supported kinds %v, want %d", name, l.Status.SupportedKinds, tt.kinds)
				}
			}
		})
	}
}

// TestTLSRouteStatus checks the parent statuses of TLSRoutes as the
// TLSRoute conformance tests expect them.
func TestTLSRouteStatus(t *testing.T) {
	cert := newCert(t, "example.com")
	gw := gateway(httpL("http", 80, ""), httpsL("https", 443, "", secretRef("", "tls")), tlsL("tls", 8443, "*.example.com", gatewayv1.TLSModePassthrough))
	badKind := ref("a", 80, 1)
	badKind.Kind = ptr(gatewayv1.Kind("Unknown"))
	tests := []struct {
		name               string
		route              *gatewayv1.TLSRoute
		accepted, resolved string
		sni                bool
		members            int
	}{
		{"accepted", tlsRoute("r", 1, "tls", []string{"a.example.com"}, ref("a", 80, 1)), "Accepted", "ResolvedRefs", true, 1},
		{"on an HTTP listener", tlsRoute("r", 1, "http", []string{"a.example.com"}, ref("a", 80, 1)), "NotAllowedByListeners", "ResolvedRefs", false, 0},
		{"on an HTTPS listener", tlsRoute("r", 1, "https", []string{"a.example.com"}, ref("a", 80, 1)), "NotAllowedByListeners", "ResolvedRefs", false, 0},
		{"no such section", tlsRoute("r", 1, "nope", []string{"a.example.com"}, ref("a", 80, 1)), "NoMatchingParent", "ResolvedRefs", false, 0},
		{"no matching hostname", tlsRoute("r", 1, "tls", []string{"a.example.org"}, ref("a", 80, 1)), "NoMatchingListenerHostname", "ResolvedRefs", false, 0},
		{"missing backend", tlsRoute("r", 1, "tls", []string{"a.example.com"}, ref("nope", 80, 1)), "Accepted", "BackendNotFound", true, 0},
		{"unknown kind", tlsRoute("r", 1, "tls", []string{"a.example.com"}, badKind), "Accepted", "InvalidKind", true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Build(Input{ClusterName: testCluster, Gateway: gw, TLSRoutes: []*gatewayv1.TLSRoute{tt.route},
				Services: []*corev1.Service{service(appNS, "a")}, Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000)},
				Secrets: []*corev1.Secret{cert.secret(infraNS, "tls")}})
			if c := parentCond(t, res, KindTLSRoute, "r", "Accepted"); c.Reason != tt.accepted {
				t.Errorf("Accepted %s, want %s", c.Reason, tt.accepted)
			}
			if c := parentCond(t, res, KindTLSRoute, "r", "ResolvedRefs"); c.Reason != tt.resolved {
				t.Errorf("ResolvedRefs %s, want %s", c.Reason, tt.resolved)
			}
			var attached int32
			for _, l := range res.Listeners {
				attached += l.Status.AttachedRoutes
			}
			if attached != map[bool]int32{true: 1}[tt.accepted == "Accepted"] {
				t.Errorf("%d attached routes", attached)
			}
			var sni []lbmodel.SNIRoute
			for _, l := range res.LB.Listeners {
				sni = append(sni, l.SNI...)
			}
			if (len(sni) > 0) != tt.sni {
				t.Fatalf("SNI routes %+v, want some: %v", sni, tt.sni)
			}
			if tt.sni {
				// A route whose backends are all invalid still has its
				// SNI route, to a pool without members that refuses the
				// connections.
				if len(res.LB.Pools) != 1 || len(res.LB.Pools[0].Members) != tt.members || res.LB.Pools[0].Name != sni[0].Pool {
					t.Errorf("pools %+v, want one of %d members", res.LB.Pools, tt.members)
				}
			}
		})
	}
}
