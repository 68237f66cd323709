package gateway

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// xbtpCRD is the experimental-channel CRD of XBackendTrafficPolicy.
const xbtpCRD = "gateway.networking.x-k8s.io_xbackendtrafficpolicies.yaml"

// TestLBSync_gatewayXBackendTrafficPolicy: on the mock's gatewayBed,
// started without the experimental XBackendTrafficPolicy CRD, the CRD is
// installed and a policy created that targets the Service t behind an
// HTTPRoute rule: npl-lbsync serves it without a restart, the rule's pool
// keeps clients by the policy's cookie, and the policy reads Accepted for
// the Gateway; when no route sends to t any more, the Gateway's entry
// leaves the policy's status.
func TestLBSync_gatewayXBackendTrafficPolicy(t *testing.T) {
	e := setup(t)
	b := e.startGatewayBed(t, "mock", "gwxbtp", "198.18.119.0/28")
	ctx, l, gw1, ns, name := b.ctx, b.l, b.gw1, b.ns, b.name
	b.httpGateway(t)
	e.Pod(t, ns, "t-1", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61020, "tcp")), func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "t"}
	})
	e.CreateService(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t",
		Annotations: map[string]string{contract.ServiceEnabledKey: "true"}}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "t"},
		Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
	}})
	exact := gatewayv1.PathMatchExact
	if _, err := gw1.HTTPRoutes(ns).Create(ctx, &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1"}, Spec: gatewayv1.HTTPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
		Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &exact, Value: ptr.To("/t")}}},
			BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
				Name: "t", Port: ptr.To(gatewayv1.PortNumber(80))}}}}}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := e.Cluster.InstallExperimentalGatewayCRDs(ctx, xbtpCRD); err != nil {
		t.Fatalf("install the XBackendTrafficPolicy CRD: %v", err)
	}
	gc, err := gatewayclient.NewForConfig(e.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	xp := gc.ExperimentalV1alpha1().XBackendTrafficPolicies(ns)
	if _, err := xp.Create(ctx, &gatewayxv1a1.XBackendTrafficPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t-sticky"},
		Spec: gatewayxv1a1.BackendTrafficPolicySpec{
			TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Kind: "Service", Name: "t"}},
			SessionPersistence: &gatewayv1.SessionPersistence{SessionName: ptr.To("t-session"),
				AbsoluteTimeout: ptr.To(gatewayv1.Duration("1m"))},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	lbName := lbmodel.GatewayLoadBalancerName(name, ns, "gw")
	poolT := lbmodel.GatewayPoolName(lbName, ns, "r1", 0)
	want := &lbmodel.Persistence{Type: lbmodel.PersistCookie, Name: "t-session", TimeoutSeconds: 60}
	// The CRD watch serves the kind within its settle window (30s) of the
	// CRD's change.
	lbsyncbed.WaitFor(t, 90*time.Second, "the pool of /t keeps clients by the policy's cookie, the policy Accepted", func() (bool, error) {
		st, err := l.MockState()
		if err != nil {
			return false, err
		}
		lb, ok := stack.FindLoadBalancer(st, lbName)
		if !ok {
			return false, errors.New("no load balancer")
		}
		j := slices.IndexFunc(lb.Pools, func(p lbmodel.Pool) bool { return p.Name == poolT })
		if j < 0 || lb.Pools[j].Policy == nil || !gocmp.Equal(want, lb.Pools[j].Policy.Persistence) {
			return false, fmt.Errorf("pool %s without the policy's persistence", poolT)
		}
		p, err := xp.Get(ctx, "t-sticky", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, a := range p.Status.Ancestors {
			if a.ControllerName != gateway.ControllerName || string(a.AncestorRef.Name) != "gw" {
				continue
			}
			c := meta.FindStatusCondition(a.Conditions, string(gatewayv1.PolicyConditionAccepted))
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(gatewayv1.PolicyReasonAccepted) || c.ObservedGeneration != p.Generation {
				return false, fmt.Errorf("the policy's Accepted for the Gateway: %+v", c)
			}
			return true, nil
		}
		return false, errors.New("no entry for the Gateway in the policy's status")
	})

	if err := gw1.HTTPRoutes(ns).Delete(ctx, "r1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 30*time.Second, "the Gateway's entry gone from the policy's status", func() (bool, error) {
		p, err := xp.Get(ctx, "t-sticky", metav1.GetOptions{})
		return err == nil && len(p.Status.Ancestors) == 0, err
	})
}
