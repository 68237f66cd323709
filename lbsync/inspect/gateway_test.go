package inspect

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/nodeportlocal/npl/contract"
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/lbsync/builder"
	"github.com/nodeportlocal/npl/lbsync/gateway"
)

// TestExpected_listsGatewayPools: a Gateway of npl's GatewayClass gives a
// load balancer whose HTTPRoute pool shows on its HTTP listener and whose
// TCPRoute pool on its TCP listener, owned by "gateway ns/name", with
// members from the Pods' annotations; another class's Gateway does not
// show, and route kinds whose CRDs are not served are not an error.
// Without a provider the state is the Gateway's Programmed condition.
func TestExpected_listsGatewayPools(t *testing.T) {
	value, err := contract.Format([]contract.Entry{{PodPort: 8080, NodeIP: "198.18.0.11", NodePort: 61001, Protocol: "tcp", IPFamily: "IPv4"}})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", Labels: labels, Annotations: map[string]string{contract.PodKey: value}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "web",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.19.1.5",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	backend := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web",
		Annotations: map[string]string{contract.ServiceEnabledKey: "true"}},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}}}
	client := fake.NewClientset(pod, backend, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	served := &metav1.APIResourceList{GroupVersion: gatewayv1.GroupVersion.String()}
	for _, r := range []string{"gatewayclasses", "gateways", "httproutes", "referencegrants", "tcproutes"} {
		served.APIResources = append(served.APIResources, metav1.APIResource{Name: r})
	}
	client.Resources = []*metav1.APIResourceList{served}

	ours := &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "npl"}, Spec: gatewayv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}
	theirs := &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: gatewayv1.GatewayClassSpec{ControllerName: "example.org/gw"}}
	gw := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gw"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: "npl", Listeners: []gatewayv1.Listener{
			{Name: "web", Port: 80, Protocol: gatewayv1.HTTPProtocolType},
			{Name: "db", Port: 5432, Protocol: gatewayv1.TCPProtocolType},
		}},
		Status: gatewayv1.GatewayStatus{
			Addresses:  []gatewayv1.GatewayStatusAddress{{Value: "198.18.100.1"}},
			Conditions: []metav1.Condition{{Type: string(gatewayv1.GatewayConditionProgrammed), Status: metav1.ConditionTrue, Reason: "Programmed", Message: "Programmed"}},
		}}
	other := gw.DeepCopy()
	other.Name, other.Spec.GatewayClassName = "other", "other"
	ref := gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: "web", Port: ptrTo(gatewayv1.PortNumber(80))}}
	parent := func(gwName, section string) []gatewayv1.ParentReference {
		return []gatewayv1.ParentReference{{Name: gatewayv1.ObjectName(gwName), SectionName: ptrTo(gatewayv1.SectionName(section))}}
	}
	hr := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "site"}}
	hr.Spec.ParentRefs = append(parent("gw", "web"), parent("other", "web")...)
	hr.Spec.Rules = []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: ref}}}}
	tr := &gatewayv1.TCPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}}
	tr.Spec.ParentRefs = parent("gw", "db")
	tr.Spec.Rules = []gatewayv1.TCPRouteRule{{BackendRefs: []gatewayv1.BackendRef{ref}}}
	// Created through the API: the fake's tracker files objects given to
	// NewSimpleClientset under v1beta1, whose types are v1's.
	gc := gatewayfake.NewSimpleClientset()
	ctx, api, opts := context.Background(), gc.GatewayV1(), metav1.CreateOptions{}
	for _, c := range []*gatewayv1.GatewayClass{ours, theirs} {
		if _, err := api.GatewayClasses().Create(ctx, c, opts); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []*gatewayv1.Gateway{gw, other} {
		if _, err := api.Gateways(g.Namespace).Create(ctx, g, opts); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.HTTPRoutes("shop").Create(ctx, hr, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := api.TCPRoutes("shop").Create(ctx, tr, opts); err != nil {
		t.Fatal(err)
	}

	settings := Settings{ClusterName: "c1", ServiceType: builder.ServiceTypeNodePortLocal, Family: "IPv4", IngressClass: "npl"}
	expected, err := Expected(ctx, client, gc, "", settings, nil)
	if err != nil {
		t.Fatal(err)
	}
	member := []Member{{IP: "198.18.0.11", Port: 61001, Enabled: true}}
	type row struct {
		Service, Protocol string
		Port              int32
		State             string
		VIPs              []string
	}
	rows := func(r Report) []row {
		var out []row
		for _, p := range r.Pools {
			if !cmp.Equal(p.Expected, member) || p.Name == "" {
				t.Errorf("pool %q: expected members %v; want %v", p.Name, p.Expected, member)
			}
			out = append(out, row{p.Service, p.Protocol, p.Port, p.State, p.VIPs})
		}
		return out
	}
	report, err := FromStatus(ctx, client, gc, expected)
	if err != nil {
		t.Fatal(err)
	}
	vip := []string{"198.18.100.1"}
	want := []row{{"gateway shop/gw", "HTTP", 80, StateInSync, vip}, {"gateway shop/gw", "TCP", 5432, StateInSync, vip}}
	got := rows(report)
	// Sorted by pool name: compare as a set.
	if len(got) == 2 && got[0].Protocol == "TCP" {
		got[0], got[1] = got[1], got[0]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Gateway pools from its status (-want +got):\n%s", diff)
	}

	// Nothing on the provider: missing, both.
	missing := Compare(expected, nil).Pools
	if len(missing) != 2 {
		t.Fatalf("%d pools compared with nothing, want the Gateway's 2: %+v", len(missing), missing)
	}
	for _, p := range missing {
		if p.State != StateMissing || p.Service != "gateway shop/gw" {
			t.Errorf("pool %s of %s: %s, want %s", p.Name, p.Service, p.State, StateMissing)
		}
	}
}

// The pools of a Gateway's load balancer show on their listeners: a TCP or
// UDP listener's own pool on it, a pool an SNI route names on its TLS
// listener, the other pools on the first HTTP listener; a member the
// provider lacks is drift in that pool only.
func TestPoolsOf_gatewayListeners(t *testing.T) {
	m := func(port int32) []lbmodel.Member {
		return []lbmodel.Member{{IP: "198.18.0.11", Port: port, Enabled: true}}
	}
	lb := &lbmodel.LoadBalancer{Name: "lb", Kind: lbmodel.L7, Gateway: "infra/gw",
		Listeners: []lbmodel.Listener{
			{Port: 80, Protocol: lbmodel.HTTP},
			{Port: 5432, Protocol: lbmodel.TCP, Pool: lbmodel.Pool{Name: "tcp", Members: m(61001)}},
			{Port: 443, Protocol: lbmodel.TLS, SNI: []lbmodel.SNIRoute{{Host: "a.example", Pool: "sni"}}},
			{Port: 53, Protocol: lbmodel.UDP, Pool: lbmodel.Pool{Name: "udp", Members: m(61002)}},
		},
		Pools: []lbmodel.Pool{{Name: "http", Members: m(61003)}, {Name: "sni", Members: m(61004)}},
	}
	actual := *lb
	actual.Listeners = append([]lbmodel.Listener(nil), lb.Listeners...)
	actual.Listeners[3].Pool = lbmodel.Pool{Name: "udp"}
	type row struct {
		Service, Name, Protocol string
		Port                    int32
		State                   string
	}
	var got []row
	for _, p := range Compare([]*lbmodel.LoadBalancer{lb}, []lbmodel.LoadBalancer{actual}).Pools {
		got = append(got, row{p.Service, p.Name, p.Protocol, p.Port, p.State})
	}
	want := []row{
		{"gateway infra/gw", "http", "HTTP", 80, StateInSync},
		{"gateway infra/gw", "sni", "TLS", 443, StateInSync},
		{"gateway infra/gw", "tcp", "TCP", 5432, StateInSync},
		{"gateway infra/gw", "udp", "UDP", 53, StateDrift},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
}

// A Gateway's status: Programmed True is in-sync, False drift, none
// missing; its addresses are the VIPs.
func TestGatewayStatusState(t *testing.T) {
	programmed := func(s metav1.ConditionStatus) []metav1.Condition {
		return []metav1.Condition{{Type: string(gatewayv1.GatewayConditionProgrammed), Status: s, Reason: "Invalid", Message: "no pool"}}
	}
	for _, tt := range []struct {
		name  string
		st    gatewayv1.GatewayStatus
		state string
		vips  []string
	}{
		{"programmed", gatewayv1.GatewayStatus{Conditions: programmed(metav1.ConditionTrue),
			Addresses: []gatewayv1.GatewayStatusAddress{{Value: "198.18.100.1"}}}, StateInSync, []string{"198.18.100.1"}},
		{"not programmed", gatewayv1.GatewayStatus{Conditions: programmed(metav1.ConditionFalse)}, StateDrift, nil},
		{"no condition", gatewayv1.GatewayStatus{}, StateMissing, nil},
	} {
		vips, state, reason := gatewayStatusState(tt.st)
		if state != tt.state || !cmp.Equal(vips, tt.vips) || reason == "" {
			t.Errorf("%s: state %s vips %v reason %q; want %s %v", tt.name, state, vips, reason, tt.state, tt.vips)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
