package gateway

import (
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/lbsync/lbpolicy/v1alpha1"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// TestLBSync_gatewayLoadBalancerPolicy: on the mock's gatewayBed (Services
// a and b, a Pod each), a LoadBalancerPolicy of a Gateway
// sets every pool of its load balancer; one of a backend Service sets the
// rule pools whose only backend it is, over the Gateway's field by field
// (its explicit slow start of 0 wins), and not a pool it shares with
// another Service. Each policy reads Accepted for its target, and nplctl
// finds the pools in sync, policies included.
func TestLBSync_gatewayLoadBalancerPolicy(t *testing.T) {
	e := setup(t)
	b := e.startGatewayBed(t, "mock", "gwpol", "198.18.117.0/28")
	ctx, l, gw1, ns, className, name := b.ctx, b.l, b.gw1, b.ns, b.class, b.name
	if _, err := gw1.Gateways(ns).Create(ctx, &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: gatewayv1.GatewaySpec{
		GatewayClassName: gatewayv1.ObjectName(className),
		Listeners:        []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := func(svc string) gatewayv1.HTTPBackendRef {
		return gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
			Name: gatewayv1.ObjectName(svc), Port: ptr.To(gatewayv1.PortNumber(80))}}}
	}
	prefix := gatewayv1.PathMatchPathPrefix
	match := func(path string) []gatewayv1.HTTPRouteMatch {
		return []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &prefix, Value: &path}}}
	}
	if _, err := gw1.HTTPRoutes(ns).Create(ctx, &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1"}, Spec: gatewayv1.HTTPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
		Rules: []gatewayv1.HTTPRouteRule{
			{Matches: match("/a"), BackendRefs: []gatewayv1.HTTPBackendRef{ref("a")}},
			{Matches: match("/ab"), BackendRefs: []gatewayv1.HTTPBackendRef{ref("a"), ref("b")}},
		},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gwPolicy := &v1alpha1.LoadBalancerPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gateway"}, Spec: v1alpha1.LoadBalancerPolicySpec{
		TargetRefs: []v1alpha1.LocalPolicyTargetReference{{Group: v1alpha1.GroupGateway, Kind: v1alpha1.KindGateway, Name: "gw"}},
		TrafficPolicy: v1alpha1.TrafficPolicy{HealthCheck: &v1alpha1.HealthCheck{Type: v1alpha1.HealthCheckHTTP, Path: "/healthz"},
			SlowStartSeconds: ptr.To[int32](10)},
	}}
	svcPolicy := &v1alpha1.LoadBalancerPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "service-a"}, Spec: v1alpha1.LoadBalancerPolicySpec{
		TargetRefs: []v1alpha1.LocalPolicyTargetReference{{Kind: v1alpha1.KindService, Name: "a"}},
		TrafficPolicy: v1alpha1.TrafficPolicy{SlowStartSeconds: ptr.To[int32](0),
			Algorithm: &v1alpha1.Algorithm{Type: v1alpha1.AlgorithmConsistentHash, HashOn: v1alpha1.HashOnCookie, HashName: "id"}},
	}}
	for _, p := range []*v1alpha1.LoadBalancerPolicy{gwPolicy, svcPolicy} {
		if err := e.CreatePolicy(t, p); err != nil {
			t.Fatal(err)
		}
	}

	lbName := lbmodel.GatewayLoadBalancerName(name, ns, "gw")
	hc := &lbmodel.HealthCheck{Type: lbmodel.CheckHTTP, Path: "/healthz"}
	want := map[string]*lbmodel.Policy{
		lbmodel.GatewayPoolName(lbName, ns, "r1", 0): {HealthCheck: hc,
			Algorithm: &lbmodel.Algorithm{Type: lbmodel.ConsistentHash, HashOn: lbmodel.HashCookie, HashName: "id"}},
		lbmodel.GatewayPoolName(lbName, ns, "r1", 1): {HealthCheck: hc, SlowStartSeconds: 10},
	}
	var got map[string]*lbmodel.Policy
	lbsyncbed.WaitFor(t, 30*time.Second, "the pools' policies", func() (bool, error) {
		st, err := l.MockState()
		if err != nil {
			return false, err
		}
		lb, ok := stack.FindLoadBalancer(st, lbName)
		got = map[string]*lbmodel.Policy{}
		for _, p := range lb.Pools {
			got[p.Name] = p.Policy
		}
		return ok && gocmp.Equal(want, got), nil
	})
	if d := gocmp.Diff(want, got); d != "" {
		t.Errorf("policies (-want +got):\n%s", d)
	}
	e.WaitPolicyCondition(t, ns, "gateway", "Gateway", "gw", metav1.ConditionTrue, "Accepted")
	e.WaitPolicyCondition(t, ns, "service-a", "Service", "a", metav1.ConditionTrue, "Accepted")

	report, stderr, code := nplctlPools(t, "--kubeconfig", e.Cluster.Kubeconfig(), "--config", l.ConfigPath, "-n", ns, "--check")
	for _, p := range report.Pools {
		if p.State != inspect.StateInSync || !gocmp.Equal(p.Policy, want[p.Name]) {
			t.Errorf("nplctl: pool %s %s, policy %+v, want %+v", p.Name, p.State, p.Policy, want[p.Name])
		}
	}
	if code != 0 || len(report.Pools) != 2 {
		t.Errorf("nplctl pools --check: exit %d, %d pools\n%s", code, len(report.Pools), stderr)
	}
}
