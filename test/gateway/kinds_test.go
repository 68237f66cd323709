package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// TestLBSync_gatewayRouteKinds: an npl-lbsync with gatewayAPI enabled, as
// the chart's ServiceAccount with the chart's gatewayAPI grants, serves a
// Gateway with HTTP, TCP, UDP and TLS listeners and a GRPCRoute, TCPRoute,
// UDPRoute and TLSRoute on the mock: exactly the expected listeners, SNI
// routes, h2c pool and rules, from the Pods' nodeIP:nodePort (the UDP
// route's from their UDP mapping); it writes each route's status; the
// backends are opted in to NodePortLocal, and released when the routes go.
func TestLBSync_gatewayRouteKinds(t *testing.T) {
	e := setup(t)
	ctx := lbsyncbed.Context(t, 4*time.Minute)
	if err := e.Cluster.InstallGatewayAPI(ctx); err != nil {
		t.Fatalf("install the Gateway API CRDs: %v", err)
	}
	if err := stack.GrantChartValues(ctx, e.Cluster, map[string]any{"gatewayAPI.enabled": true}); err != nil {
		t.Fatal(err)
	}
	name := lbsyncbed.ClusterName + "-gwkinds"
	cfg := e.Config(name, "NodePortLocal", "npl.io/gwkinds", "198.18.112.0/28") + "gatewayAPI:\n  enabled: true\n"
	l := e.StartSyncer(t, "npl-lbsync-gwkinds", name, cfg, false)
	gc, err := gatewayclient.NewForConfig(e.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	gw1 := gc.GatewayV1()
	ns := e.Namespace(t)

	className := "npl-kinds-" + ns
	if _, err := gw1.GatewayClasses().Create(ctx, &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: className},
		Spec: gatewayv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw1.GatewayClasses().Delete(context.Background(), className, metav1.DeleteOptions{}) })

	// Backends, one Pod each on node i: grpc, tcp, udp (its UDP port 53 ->
	// container port 5353, mapped to 62000+i), tls.
	apps := []string{"grpc", "tcp", "udp", "tls"}
	for i, app := range apps {
		entries := []string{lbsyncbed.Entry(8080, e.NodeIP(i%2), 61000+i, "tcp")}
		ports := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}
		if app == "udp" {
			entries = append(entries, lbsyncbed.Entry(5353, e.NodeIP(i%2), 62000+i, "udp"))
			ports = append(ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")})
		}
		e.Pod(t, ns, app+"-1", e.NodeName(i%2), lbsyncbed.List(entries...), func(p *corev1.Pod) { p.Labels = map[string]string{"app": app} })
		e.CreateService(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": app}, Ports: ports}})
	}
	passthrough := gatewayv1.TLSModePassthrough
	wildcard := gatewayv1.Hostname("*.example.com")
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: gatewayv1.ObjectName(className),
		Listeners: []gatewayv1.Listener{
			{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType},
			{Name: "tcp", Port: 5000, Protocol: gatewayv1.TCPProtocolType},
			{Name: "udp", Port: 5300, Protocol: gatewayv1.UDPProtocolType},
			{Name: "tls", Port: 8443, Protocol: gatewayv1.TLSProtocolType, Hostname: &wildcard,
				TLS: &gatewayv1.ListenerTLSConfig{Mode: &passthrough}},
		},
	}}
	if _, err := gw1.Gateways(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := func(svc string, port int32) gatewayv1.BackendRef {
		return gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(svc), Port: &port}}
	}
	parents := func(section string) gatewayv1.CommonRouteSpec {
		s := gatewayv1.SectionName(section)
		return gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw", SectionName: &s}}}
	}
	service, method := "echo.Echo", "Ping"
	exact := gatewayv1.GRPCMethodMatchExact
	if _, err := gw1.GRPCRoutes(ns).Create(ctx, &gatewayv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "g"},
		Spec: gatewayv1.GRPCRouteSpec{CommonRouteSpec: parents("http"), Rules: []gatewayv1.GRPCRouteRule{{
			Matches:     []gatewayv1.GRPCRouteMatch{{Method: &gatewayv1.GRPCMethodMatch{Type: &exact, Service: &service, Method: &method}}},
			BackendRefs: []gatewayv1.GRPCBackendRef{{BackendRef: ref("grpc", 80)}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gw1.TCPRoutes(ns).Create(ctx, &gatewayv1.TCPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
		Spec: gatewayv1.TCPRouteSpec{CommonRouteSpec: parents("tcp"), Rules: []gatewayv1.TCPRouteRule{{
			BackendRefs: []gatewayv1.BackendRef{ref("tcp", 80)}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gw1.UDPRoutes(ns).Create(ctx, &gatewayv1.UDPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "u"},
		Spec: gatewayv1.UDPRouteSpec{CommonRouteSpec: parents("udp"), Rules: []gatewayv1.UDPRouteRule{{
			BackendRefs: []gatewayv1.BackendRef{ref("udp", 53)}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gw1.TLSRoutes(ns).Create(ctx, &gatewayv1.TLSRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
		Spec: gatewayv1.TLSRouteSpec{CommonRouteSpec: parents("tls"), Hostnames: []gatewayv1.Hostname{"secure.example.com"},
			Rules: []gatewayv1.TLSRouteRule{{BackendRefs: []gatewayv1.BackendRef{ref("tls", 80)}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	lbName := lbmodel.GatewayLoadBalancerName(name, ns, "gw")
	grpcPool := lbmodel.GatewayRoutePoolName(lbName, gateway.KindGRPCRoute, ns, "g", 0)
	tlsPool := lbmodel.GatewayRoutePoolName(lbName, gateway.KindTLSRoute, ns, "s", 0)
	ip0, ip1 := e.NodeIP(0), e.NodeIP(1)
	wantPools := []lbmodel.Pool{
		{Name: grpcPool, AppProtocol: lbmodel.AppProtocolH2C, Members: []lbmodel.Member{{IP: ip0, Port: 61000, Enabled: true}}},
		{Name: tlsPool, Members: []lbmodel.Member{{IP: ip1, Port: 61003, Enabled: true}}},
	}
	wantRules := []lbmodel.Rule{{Path: "/echo.Echo/Ping", PathType: lbmodel.PathExact, Pool: grpcPool, Ports: []int32{80}}}
	wantListeners := []lbmodel.Listener{
		{Port: 80, Protocol: lbmodel.HTTP},
		{Port: 5000, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(lbName, lbmodel.TCP, 5000),
			Members: []lbmodel.Member{{IP: ip1, Port: 61001, Enabled: true}}}},
		{Port: 8443, Protocol: lbmodel.TLS, SNI: []lbmodel.SNIRoute{{Host: "secure.example.com", Pool: tlsPool}}},
		{Port: 5300, Protocol: lbmodel.UDP, Pool: lbmodel.Pool{Name: lbmodel.PoolName(lbName, lbmodel.UDP, 5300),
			Members: []lbmodel.Member{{IP: ip0, Port: 62002, Enabled: true}}}},
	}
	lb := waitModel(t, l, lbName, wantPools, wantRules)
	sortListeners := cmpopts.SortSlices(func(a, b lbmodel.Listener) bool { return a.Port < b.Port })
	if d := gocmp.Diff(wantListeners, lb.Listeners, cmpopts.EquateEmpty(), sortListeners); d != "" {
		t.Errorf("listeners (-want +got):\n%s", d)
	}

	// Statuses: every route Accepted with its references resolved, one
	// route on each listener.
	routeParents := map[string]func() ([]gatewayv1.RouteParentStatus, error){
		"GRPCRoute g": func() ([]gatewayv1.RouteParentStatus, error) {
			r, err := gw1.GRPCRoutes(ns).Get(ctx, "g", metav1.GetOptions{})
			return statusParents(r, err, func() []gatewayv1.RouteParentStatus { return r.Status.Parents })
		},
		"TCPRoute t": func() ([]gatewayv1.RouteParentStatus, error) {
			r, err := gw1.TCPRoutes(ns).Get(ctx, "t", metav1.GetOptions{})
			return statusParents(r, err, func() []gatewayv1.RouteParentStatus { return r.Status.Parents })
		},
		"UDPRoute u": func() ([]gatewayv1.RouteParentStatus, error) {
			r, err := gw1.UDPRoutes(ns).Get(ctx, "u", metav1.GetOptions{})
			return statusParents(r, err, func() []gatewayv1.RouteParentStatus { return r.Status.Parents })
		},
		"TLSRoute s": func() ([]gatewayv1.RouteParentStatus, error) {
			r, err := gw1.TLSRoutes(ns).Get(ctx, "s", metav1.GetOptions{})
			return statusParents(r, err, func() []gatewayv1.RouteParentStatus { return r.Status.Parents })
		},
	}
	for what, get := range routeParents {
		lbsyncbed.WaitFor(t, 30*time.Second, "the status of "+what, func() (bool, error) {
			ps, err := get()
			if err != nil || len(ps) != 1 {
				return false, fmt.Errorf("parents %+v: %v", ps, err)
			}
			p := ps[0]
			return p.ControllerName == gateway.ControllerName && hasCond(p.Conditions, "Accepted", metav1.ConditionTrue, "Accepted") &&
				hasCond(p.Conditions, "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs"), fmt.Errorf("parent %+v", p)
		})
	}
	lbsyncbed.WaitFor(t, 30*time.Second, "the Gateway status", func() (bool, error) {
		g, err := gw1.Gateways(ns).Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !hasCond(g.Status.Conditions, "Programmed", metav1.ConditionTrue, "Programmed") || len(g.Status.Listeners) != 4 {
			return false, fmt.Errorf("status %+v", g.Status)
		}
		for _, ls := range g.Status.Listeners {
			if ls.AttachedRoutes != 1 || !hasCond(ls.Conditions, "Programmed", metav1.ConditionTrue, "Programmed") {
				return false, fmt.Errorf("listener %+v", ls)
			}
		}
		return true, nil
	})
	// The backends are opted in to NodePortLocal.
	optedIn := func(s string) bool {
		svc := e.Service(t, ns, s)
		return svc.Annotations[contract.ServiceEnabledKey] == "true" && svc.Annotations[contract.AutoAnnotatedKey] == "true"
	}
	for _, s := range apps {
		lbsyncbed.WaitFor(t, 20*time.Second, "the opt-in of "+s, func() (bool, error) { return optedIn(s), nil })
	}

	// The routes deleted: their listeners lose their members and SNI
	// routes, and the backends their opt-in.
	deletes := []func() error{
		func() error { return gw1.GRPCRoutes(ns).Delete(ctx, "g", metav1.DeleteOptions{}) },
		func() error { return gw1.TCPRoutes(ns).Delete(ctx, "t", metav1.DeleteOptions{}) },
		func() error { return gw1.UDPRoutes(ns).Delete(ctx, "u", metav1.DeleteOptions{}) },
		func() error { return gw1.TLSRoutes(ns).Delete(ctx, "s", metav1.DeleteOptions{}) },
	}
	for _, del := range deletes {
		if err := del(); err != nil {
			t.Fatal(err)
		}
	}
	lb = waitModel(t, l, lbName, nil, nil)
	for _, ls := range lb.Listeners {
		if len(ls.Pool.Members) > 0 || len(ls.SNI) > 0 {
			t.Errorf("listener %+v: members or SNI routes left", ls)
		}
	}
	for _, s := range apps {
		lbsyncbed.WaitFor(t, 20*time.Second, "the opt-in of "+s+" removed", func() (bool, error) {
			_, on := e.Service(t, ns, s).Annotations[contract.ServiceEnabledKey]
			return !on, nil
		})
	}
}

// statusParents returns the parents of a route read with err, or err.
func statusParents[T any](_ T, err error, parents func() []gatewayv1.RouteParentStatus) ([]gatewayv1.RouteParentStatus, error) {
	if err != nil {
		return nil, err
	}
	return parents(), nil
}
