package inspect

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/claim"
	"github.com/nodeportlocal/npl/lbsync/ingress"
)

// TestExpected_listsIngressPools: an Ingress of our class gives an L7 load
// balancer whose pools (one per backend Service port) show beside the L4
// pools of a LoadBalancer Service, with members from the Pods'
// annotations, and with the same states: in-sync, drift, missing.
func TestExpected_listsIngressPools(t *testing.T) {
	ready := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.19.1.5",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	value, err := contract.Format([]contract.Entry{{PodPort: 8080, NodeIP: "198.18.0.11", NodePort: 61001, Protocol: "tcp", IPFamily: "IPv4"}})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", Labels: labels, Annotations: map[string]string{contract.PodKey: value}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "web",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
		Status: ready,
	}
	ports := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}
	class := "npl.io/lb"
	lbSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "front"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Selector: labels, Ports: ports}}
	backend := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web",
		Annotations: map[string]string{contract.ServiceEnabledKey: "true"}},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: ports}}
	ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "npl"}, Spec: networkingv1.IngressClassSpec{Controller: ingress.ControllerName}}
	pt := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "site"},
		Spec: networkingv1.IngressSpec{IngressClassName: &ic.Name, Rules: []networkingv1.IngressRule{{Host: "shop.example",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &pt, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}}
	// Another class's Ingress is not ours.
	other := ing.DeepCopy()
	other.Name, other.Spec.IngressClassName = "other", new(string)
	*other.Spec.IngressClassName = "nginx"
	client := fake.NewClientset(pod, lbSvc, backend, ic, ing, other)

	settings := Settings{ClusterName: "c1", ServiceType: builder.ServiceTypeNodePortLocal, Family: "IPv4",
		Claim: claim.ClaimConfig{LoadBalancerClass: class}, IngressClass: "npl"}
	expected, err := Expected(context.Background(), client, nil, "", settings, nil)
	if err != nil {
		t.Fatal(err)
	}
	member := Member{IP: "198.18.0.11", Port: 61001, Enabled: true}
	l7Pool := lbmodel.IngressPoolName(lbmodel.IngressLoadBalancerName("c1", "shop", "site"), "shop", "web", "80")
	l4Pool := lbmodel.PoolName(lbmodel.LoadBalancerName("c1", "shop", "front"), lbmodel.TCP, 80)
	type row struct{ Service, Name, Protocol, State string }
	rows := func(r Report) []row {
		var out []row
		for _, p := range r.Pools {
			if !cmp.Equal(p.Expected, []Member{member}) {
				t.Errorf("pool %s: expected members %v; want %v", p.Name, p.Expected, member)
			}
			out = append(out, row{p.Service, p.Name, p.Protocol, p.State})
		}
		return out
	}
	if diff := cmp.Diff([]row{
		{"ingress shop/site", l7Pool, "HTTP", StateMissing},
		{"shop/front", l4Pool, "TCP", StateMissing},
	}, rows(Compare(expected, nil))); diff != "" {
		t.Errorf("nothing on the provider (-want +got):\n%s", diff)
	}

	// The provider holds the L7 pool with a stale member: drift; the L4
	// pool as expected: in-sync.
	var actual []lbmodel.LoadBalancer
	for _, lb := range expected {
		a := *lb
		if lb.IsL7() {
			a.Pools = []lbmodel.Pool{{Name: l7Pool, Members: []lbmodel.Member{{IP: "198.18.0.12", Port: 61001, Enabled: true}}}}
		}
		actual = append(actual, a)
	}
	if diff := cmp.Diff([]row{
		{"ingress shop/site", l7Pool, "HTTP", StateDrift},
		{"shop/front", l4Pool, "TCP", StateInSync},
	}, rows(Compare(expected, actual))); diff != "" {
		t.Errorf("one stale L7 member (-want +got):\n%s", diff)
	}
}
