package gateway

import (
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/gateway"
	"github.com/nodeportlocal/npl/lbsync/inspect"
	"github.com/nodeportlocal/npl/test/harness/lbsyncbed"
	"github.com/nodeportlocal/npl/test/harness/stack"
)

// TestLBSync_gatewayBackendTLSPolicy: on the mock's gatewayBed, a
// BackendTLSPolicy of a Service t whose CA ConfigMap does not exist yet is
// not accepted (NoValidCACertificate, InvalidCACertificateRef) and the
// rule to t answers 500; once the ConfigMap holds a CA certificate the
// rule's pool verifies TLS to t's Pods with it and the policy reads
// Accepted for the Gateway, and nplctl finds the pool in sync; emptying
// the ConfigMap's ca.crt (a watched change, no spec change) takes it back;
// when no route sends to t any more, the Gateway's entry leaves the
// policy's status. t carries the user's own opt-in, and no route of the
// Gateway sends to the bed's Services (whose opt-in the bed's other
// npl-lbsync takes away and this one adds back for a moment, which would
// sync the Gateway again whatever the ConfigMaps do).
func TestLBSync_gatewayBackendTLSPolicy(t *testing.T) {
	e := setup(t)
	b := e.startGatewayBed(t, "mock", "gwtls", "198.18.118.0/28")
	ctx, l, gw1, ns, name := b.ctx, b.l, b.gw1, b.ns, b.name
	b.httpGateway(t)
	e.Pod(t, ns, "t-1", e.NodeName(0), lbsyncbed.List(lbsyncbed.Entry(8080, e.NodeIP(0), 61010, "tcp")), func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "t"}
	})
	e.CreateService(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t",
		Annotations: map[string]string{contract.ServiceEnabledKey: "true"}}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "t"},
		Ports:    []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
	}})
	exact := gatewayv1.PathMatchExact
	rule := func(path, svc string) gatewayv1.HTTPRouteRule {
		return gatewayv1.HTTPRouteRule{Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &exact, Value: ptr.To(path)}}},
			BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
				Name: gatewayv1.ObjectName(svc), Port: ptr.To(gatewayv1.PortNumber(443))}}}}}
	}
	if _, err := gw1.HTTPRoutes(ns).Create(ctx, &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1"}, Spec: gatewayv1.HTTPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
		Rules:           []gatewayv1.HTTPRouteRule{rule("/t", "t")},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	policy := &gatewayv1.BackendTLSPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t-tls"}, Spec: gatewayv1.BackendTLSPolicySpec{
		TargetRefs: []gatewayv1.LocalPolicyTargetReferenceWithSectionName{{
			LocalPolicyTargetReference: gatewayv1.LocalPolicyTargetReference{Kind: "Service", Name: "t"}, SectionName: ptr.To[gatewayv1.SectionName]("https")}},
		Validation: gatewayv1.BackendTLSPolicyValidation{Hostname: "t.example.com",
			CACertificateRefs: []gatewayv1.LocalObjectReference{{Kind: "ConfigMap", Name: "t-ca"}}},
	}}
	if _, err := gw1.BackendTLSPolicies(ns).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	lbName := lbmodel.GatewayLoadBalancerName(name, ns, "gw")
	poolT := lbmodel.GatewayPoolName(lbName, ns, "r1", 0)
	// state waits until rule /t answers 500 (tls nil) or its pool holds tls,
	// and the policy's entry for the Gateway has the conditions want
	// (type: status/reason).
	state := func(what string, tls *lbmodel.BackendTLS, want map[string]string) {
		t.Helper()
		var got string
		lbsyncbed.WaitFor(t, 30*time.Second, what, func() (bool, error) {
			st, err := l.MockState()
			if err != nil {
				return false, err
			}
			lb, ok := stack.FindLoadBalancer(st, lbName)
			if !ok || lb.HTTP == nil {
				return false, nil
			}
			i := slices.IndexFunc(lb.HTTP.Rules, func(r lbmodel.Rule) bool { return r.Path == "/t" })
			j := slices.IndexFunc(lb.Pools, func(p lbmodel.Pool) bool { return p.Name == poolT })
			switch {
			case i < 0:
				return false, nil
			case tls == nil && (lb.HTTP.Rules[i].FixedStatus != 500 || j >= 0):
				return false, nil
			case tls != nil && (j < 0 || lb.Pools[j].Policy == nil || !gocmp.Equal(tls, lb.Pools[j].Policy.BackendTLS)):
				return false, nil
			}
			p, err := gw1.BackendTLSPolicies(ns).Get(ctx, "t-tls", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got = ""
			for _, a := range p.Status.Ancestors {
				if a.ControllerName != gateway.ControllerName || string(a.AncestorRef.Name) != "gw" {
					continue
				}
				conds := map[string]string{}
				for _, c := range a.Conditions {
					if c.ObservedGeneration != p.Generation {
						return false, nil
					}
					conds[c.Type] = string(c.Status) + "/" + c.Reason
				}
				got = gocmp.Diff(want, conds)
				return got == "", nil
			}
			got = "no entry for the Gateway"
			return false, nil
		})
	}
	state("the policy without its ConfigMap", nil, map[string]string{"Accepted": "False/NoValidCACertificate", "ResolvedRefs": "False/InvalidCACertificateRef"})

	certPEM, _ := selfSigned(t, "ca.example.com")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t-ca"}, Data: map[string]string{gateway.CACertKey: string(certPEM)}}
	if _, err := e.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tls := &lbmodel.BackendTLS{Hostname: "t.example.com", CACertPEM: string(certPEM)}
	state("the policy with its CA certificate", tls, map[string]string{"Accepted": "True/Accepted", "ResolvedRefs": "True/ResolvedRefs"})
	report, stderr, code := nplctlPools(t, "--kubeconfig", e.Cluster.Kubeconfig(), "--config", l.ConfigPath, "-n", ns, "--check")
	for _, p := range report.Pools {
		if p.State != inspect.StateInSync || (p.Name == poolT && (p.Policy == nil || !gocmp.Equal(p.Policy.BackendTLS, tls))) {
			t.Errorf("nplctl: pool %s %s, policy %+v", p.Name, p.State, p.Policy)
		}
	}
	if code != 0 || len(report.Pools) != 1 {
		t.Errorf("nplctl pools --check: exit %d, %d pools\n%s", code, len(report.Pools), stderr)
	}

	cm.Data[gateway.CACertKey] = ""
	if _, err := e.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	state("the policy with an empty ca.crt", nil, map[string]string{"Accepted": "False/NoValidCACertificate", "ResolvedRefs": "False/InvalidCACertificateRef"})

	if err := gw1.HTTPRoutes(ns).Delete(ctx, "r1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lbsyncbed.WaitFor(t, 30*time.Second, "the Gateway's entry gone from the policy's status", func() (bool, error) {
		p, err := gw1.BackendTLSPolicies(ns).Get(ctx, "t-tls", metav1.GetOptions{})
		return err == nil && len(p.Status.Ancestors) == 0, err
	})
}
