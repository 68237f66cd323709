package gateway

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nodeportlocal/npl/lbmodel"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestTCPRoutes: each TCP listener gets the pool of its oldest route,
// weighted; every attached route is Accepted and counted.
func TestTCPRoutes(t *testing.T) {
	gw := gateway(streamL("tcp", gatewayv1.TCPProtocolType, 9000), streamL("tcp2", gatewayv1.TCPProtocolType, 9001))
	older := tcpRoute("older", 100, "", ref("a", 80, 3), ref("b", 80, 1))
	newer := tcpRoute("newer", 200, "tcp", ref("b", 80, 1))
	only2 := tcpRoute("only2", 300, "tcp2", ref("b", 80, 1))
	res := Build(Input{ClusterName: testCluster, Gateway: gw, TCPRoutes: []*gatewayv1.TCPRoute{only2, newer, older},
		Services: []*corev1.Service{service(appNS, "a"), service(appNS, "b")},
		Pods:     []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), pod(appNS, "b", "b-1", "198.18.0.2", 61001)}})
	if len(res.Report.Errors) > 0 {
		t.Fatalf("errors: %v", res.Report.Errors)
	}
	// 3 to 1, scaled to 1-256 as HTTPRoute weights are.
	oldest := []lbmodel.Member{up("198.18.0.1", 61000, 256), up("198.18.0.2", 61001, 85)}
	want := []lbmodel.Listener{
		{Port: 9000, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(lbName, lbmodel.TCP, 9000), Members: oldest}},
		{Port: 9001, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(lbName, lbmodel.TCP, 9001), Members: oldest}},
	}
	if res.LB == nil {
		t.Fatal("no model")
	}
	if diff := cmp.Diff(want, res.LB.Listeners, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("listeners (-want +got):\n%s", diff)
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Errorf("the model does not pass Normalize: %v", err)
	}
	if len(res.LB.Pools) != 0 || len(res.LB.HTTP.Rules) != 0 {
		t.Errorf("shared pools %v, rules %v: want none", res.LB.Pools, res.LB.HTTP.Rules)
	}
	for _, name := range []string{"older", "newer", "only2"} {
		if c := parentCond(t, res, KindTCPRoute, name, "Accepted"); c.Status != metav1.ConditionTrue {
			t.Errorf("%s: Accepted %+v", name, c)
		}
	}
	if got := listenerResult(t, res, "tcp").Status.AttachedRoutes; got != 2 {
		t.Errorf("tcp: %d attached routes, want 2", got)
	}
	if got := listenerResult(t, res, "tcp2").Status.AttachedRoutes; got != 2 {
		t.Errorf("tcp2: %d attached routes, want 2", got)
	}
	if diff := cmp.Diff([]ServiceRef{{appNS, "a"}, {appNS, "b"}}, res.Backends); diff != "" {
		t.Errorf("backends (-want +got):\n%s", diff)
	}
	if got := res.Report.ReadyBackends; got != 4 {
		t.Errorf("ready backends %d, want 4", got)
	}
}

// TestStreamRouteStatus checks the parent statuses of TCPRoutes and
// UDPRoutes as the TCP and UDP conformance tests expect them.
func TestStreamRouteStatus(t *testing.T) {
	gw := gateway(httpL("http", 5300, ""), streamL("tcp", gatewayv1.TCPProtocolType, 9000), streamL("udp", gatewayv1.UDPProtocolType, 9000))
	cross := ref("x", 80, 1)
	cross.Namespace = ptr(gatewayv1.Namespace("other"))
	badKind := ref("x", 80, 1)
	badKind.Kind = ptr(gatewayv1.Kind("Pod"))
	svcs := []*corev1.Service{service(appNS, "a"), udpService(appNS, "u"), service("other", "x")}
	tests := []struct {
		name               string
		tcp                *gatewayv1.TCPRoute
		udp                *gatewayv1.UDPRoute
		accepted, resolved string
		members            int
	}{
		{"tcp", tcpRoute("r", 1, "tcp", ref("a", 80, 1)), nil, "Accepted", "ResolvedRefs", 1},
		{"tcp on an HTTP listener", tcpRoute("r", 1, "http", ref("a", 80, 1)), nil, "NotAllowedByListeners", "ResolvedRefs", -1},
		{"tcp on a UDP listener", tcpRoute("r", 1, "udp", ref("a", 80, 1)), nil, "NotAllowedByListeners", "ResolvedRefs", -1},
		{"tcp without section", tcpRoute("r", 1, "", ref("a", 80, 1)), nil, "Accepted", "ResolvedRefs", 1},
		{"tcp missing backend", tcpRoute("r", 1, "tcp", ref("nope", 80, 1)), nil, "Accepted", "BackendNotFound", 0},
		{"tcp cross namespace", tcpRoute("r", 1, "tcp", cross), nil, "Accepted", "RefNotPermitted", 0},
		{"tcp invalid kind", tcpRoute("r", 1, "tcp", badKind), nil, "Accepted", "InvalidKind", 0},
		{"udp", nil, udpRoute("r", 1, "udp", ref("u", 53, 1)), "Accepted", "ResolvedRefs", 1},
		{"udp to a TCP port", nil, udpRoute("r", 1, "udp", ref("u", 80, 1)), "Accepted", "ResolvedRefs", 0},
		{"udp on a TCP listener", nil, udpRoute("r", 1, "tcp", ref("u", 53, 1)), "NotAllowedByListeners", "ResolvedRefs", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{ClusterName: testCluster, Gateway: gw, Services: svcs,
				Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000), udpPod(appNS, "u", "u-1", "198.18.0.3", 62000)}}
			kind, proto, section := KindTCPRoute, lbmodel.TCP, "tcp"
			if tt.tcp != nil {
				in.TCPRoutes = []*gatewayv1.TCPRoute{tt.tcp}
			} else {
				in.UDPRoutes = []*gatewayv1.UDPRoute{tt.udp}
				kind, proto, section = KindUDPRoute, lbmodel.UDP, "udp"
			}
			res := Build(in)
			if c := parentCond(t, res, kind, "r", "Accepted"); c.Reason != tt.accepted || c.ObservedGeneration != 2 {
				t.Errorf("Accepted %s (generation %d), want %s", c.Reason, c.ObservedGeneration, tt.accepted)
			}
			if c := parentCond(t, res, kind, "r", "ResolvedRefs"); c.Reason != tt.resolved {
				t.Errorf("ResolvedRefs %s, want %s", c.Reason, tt.resolved)
			}
			attached := int32(0)
			if tt.members >= 0 {
				attached = 1
			}
			if got := listenerResult(t, res, section).Status.AttachedRoutes; got != attached {
				t.Errorf("%s listener: %d attached routes, want %d", section, got, attached)
			}
			i := slices.IndexFunc(res.LB.Listeners, func(l lbmodel.Listener) bool { return l.Protocol == proto })
			if i < 0 {
				t.Fatalf("no %s listener: %+v", proto, res.LB.Listeners)
			}
			// Without an attached route the listener's pool has no members:
			// it refuses connections.
			if n := len(res.LB.Listeners[i].Pool.Members); n != max(tt.members, 0) {
				t.Errorf("%s pool: %d members, want %d", proto, n, max(tt.members, 0))
			}
		})
	}
}

// TestUDPRoute: a UDPRoute's pool holds the UDP port's members, and a UDP
// listener shares its port number with a TCP listener.
func TestUDPRoute(t *testing.T) {
	gw := gateway(streamL("udp", gatewayv1.UDPProtocolType, 5300), streamL("tcp", gatewayv1.TCPProtocolType, 5300))
	res := Build(Input{ClusterName: testCluster, Gateway: gw,
		UDPRoutes: []*gatewayv1.UDPRoute{udpRoute("dns", 1, "", ref("u", 53, 1))},
		TCPRoutes: []*gatewayv1.TCPRoute{tcpRoute("web", 1, "", ref("u", 80, 1))},
		Services:  []*corev1.Service{udpService(appNS, "u")},
		Pods:      []*corev1.Pod{udpPod(appNS, "u", "u-1", "198.18.0.3", 62000)}})
	want := []lbmodel.Listener{
		{Port: 5300, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(lbName, lbmodel.TCP, 5300),
			Members: []lbmodel.Member{up("198.18.0.3", 62000, 0)}}},
		{Port: 5300, Protocol: lbmodel.UDP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(lbName, lbmodel.UDP, 5300),
			Members: []lbmodel.Member{up("198.18.0.3", 62001, 0)}}},
	}
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	if diff := cmp.Diff(want, res.LB.Listeners, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("listeners (-want +got):\n%s", diff)
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Errorf("the model does not pass Normalize: %v", err)
	}
	for _, l := range res.Listeners {
		if c := cond(l.Status.Conditions, "Conflicted"); c.Status != metav1.ConditionFalse {
			t.Errorf("listener %s: %+v", l.Status.Name, c)
		}
	}
	if diff := cmp.Diff([]ServiceRef{{appNS, "u"}}, res.Backends); diff != "" {
		t.Errorf("backends (-want +got):\n%s", diff)
	}
}

// TestStreamRoutes_invalidShareLeftOut: the connections of TCP, UDP and
// TLS routes cannot be answered a status, so their invalid backendRefs
// have no share (Pool.InvalidWeight is for HTTP rules): the valid ones take
// every connection.
func TestStreamRoutes_invalidShareLeftOut(t *testing.T) {
	gw := gateway(streamL("tcp", gatewayv1.TCPProtocolType, 9000), tlsL("tls", 443, "", gatewayv1.TLSModePassthrough))
	res := Build(Input{ClusterName: testCluster, Gateway: gw,
		TCPRoutes: []*gatewayv1.TCPRoute{tcpRoute("t", 1, "tcp", ref("a", 80, 1), ref("nope", 80, 1))},
		TLSRoutes: []*gatewayv1.TLSRoute{tlsRoute("s", 1, "tls", []string{"a.example.com"}, ref("a", 80, 1), ref("nope", 80, 1))},
		Services:  []*corev1.Service{service(appNS, "a")}, Pods: []*corev1.Pod{pod(appNS, "a", "a-1", "198.18.0.1", 61000)}})
	if res.LB == nil {
		t.Fatalf("no model: %v", res.Report.Errors)
	}
	members := []lbmodel.Member{up("198.18.0.1", 61000, 0)}
	pools := slices.Clone(res.LB.Pools)
	for _, l := range res.LB.Listeners {
		if l.Protocol == lbmodel.TCP {
			pools = append(pools, l.Pool)
		}
	}
	if len(pools) != 2 {
		t.Fatalf("pools %+v, want the TCP listener's and the TLS route's", pools)
	}
	for _, p := range pools {
		if diff := cmp.Diff(lbmodel.Pool{Name: p.Name, Members: members}, p); diff != "" {
			t.Errorf("pool (-want +got):\n%s", diff)
		}
	}
	if _, err := lbmodel.Normalize(res.LB); err != nil {
		t.Errorf("the model does not pass Normalize: %v", err)
	}
}
